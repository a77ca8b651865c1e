"""Memory that survives months: output budgets, cut-offs, the edits form, bounded daily notes,
one transaction per extraction (SPEC S19), through the real SDK and the fake Messages API."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support.memory_env import CONVERSATION, add_messages, between, chat, memory_env, user_prompt

DAILY = "memory/2026-04-01.md"


def reply(daily: str = "", *, memory: str = "", profile: str = "", memory_edits: list[dict[str, str]] | None = None,
          profile_edits: list[dict[str, str]] | None = None, should_update: bool = True) -> str:
    body: dict[str, Any] = {"should_update": should_update, "reason": "kept", "daily_entry": daily,
                            "memory_update": memory, "profile_update": profile}
    if memory_edits is not None:
        body["memory_edits"] = memory_edits
    if profile_edits is not None:
        body["profile_edits"] = profile_edits
    return json.dumps(body, ensure_ascii=False)


# -- output budget and cut-off replies ---------------------------------------------


@pytest.mark.parametrize(("locale", "expected"), [
    ("en", 1334 + 4000 + 1000 + 256),  # ~3 characters per token; the entry takes summary-max-tokens
    ("zh-CN", 4000 + 12000 + 2000 + 256),  # one token per character; a 2000-character entry
])
async def test_max_tokens_fits_both_files_at_their_budgets(tmp_path: Path, locale: str, expected: int) -> None:
    async with memory_env(tmp_path, locale=locale) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(reply(should_update=False))
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        (request,) = env.fake.messages_requests()
    assert request["max_tokens"] == expected


async def test_chinese_files_raise_max_tokens_in_an_english_locale(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await env.core.workspace.write(1, "MEMORY.md", "# 记忆\n- 用户喜欢喝咖啡，每天早上一杯。\n")
        await add_messages(env.core, chat(2))
        env.fake.reply_text(reply(should_update=False))
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        (request,) = env.fake.messages_requests()
    assert request["max_tokens"] == 16000 + 2000 + 256


async def test_a_cut_off_reply_is_never_parsed_and_is_asked_again_for_edits(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await env.core.workspace.write(1, "MEMORY.md", "# Memory\n- likes tea\n")
        await add_messages(env.core, chat(2))
        # Valid JSON, but the model had not finished: nothing of it may be written.
        env.fake.reply_text(reply("- cut", memory="# Memory\n- wiped"), stop_reason="max_tokens")
        env.fake.reply_text(reply("- met Ann", memory_edits=[{"append": "- likes Oslo"}]))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        note, _ = await env.core.workspace.read_text(1, DAILY)
        first, second = env.fake.messages_requests()
    assert outcome.status == "completed"
    assert memory == "# Memory\n- likes tea\n- likes Oslo\n"
    assert note == "# 2026-04-01\n\n- met Ann\n"
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    follow_up = second["messages"][2]["content"]
    assert f"cut off after {first['max_tokens']} tokens" in follow_up and "memory_edits" in follow_up


async def test_cut_off_twice_fails_with_that_reason_and_writes_nothing(tmp_path: Path) -> None:
    async with memory_env(tmp_path, locale="zh-CN") as env:
        await add_messages(env.core, chat(2))
        before = await env.core.workspace.list(1)
        env.fake.reply_text(reply("- 一", memory="记忆" * 10), stop_reason="max_tokens")
        env.fake.reply_text(reply("- 二", memory="记忆" * 10), stop_reason="max_tokens")
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION, attempts=1)
        after = await env.core.workspace.list(1)
        conversation = await env.core.repos.conversations.get(CONVERSATION)
        runs = await env.core.repos.memory_runs.for_conversation(CONVERSATION)
    assert outcome.status == "failed" and outcome.retryable
    assert "cut off at max_tokens (18256) twice" in outcome.reason
    assert "截断" in env.fake.messages_requests()[1]["messages"][2]["content"]
    assert [(f.filename, f.version) for f in after] == [(f.filename, f.version) for f in before]
    assert conversation is not None and conversation.memory_upto_message_id == 0
    assert runs[-1].status == "failed" and "cut off" in (runs[-1].error or "")


# -- the edits form ------------------------------------------------------------------


async def test_edits_replace_exactly_once_and_append_in_order(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await env.core.workspace.write(1, "PROFILE.md", "# Profile\n- City: Oslo\n- Job: nurse\n")
        await add_messages(env.core, chat(2))
        env.fake.reply_text(reply(profile_edits=[{"old": "- City: Oslo", "new": "- City: Bergen"},
                                                 {"old": "- Job: nurse\n", "new": ""},
                                                 {"append": "- Pet: a cat"}]))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        profile, _ = await env.core.workspace.read_text(1, "PROFILE.md")
    assert outcome.files == ("PROFILE.md",)
    assert profile == "# Profile\n- City: Bergen\n- Pet: a cat\n"


async def test_budgets_apply_to_the_result_of_edits(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"memory-max-chars": 60}) as env:
        await env.core.workspace.write(1, "MEMORY.md", "# Memory\n" + "- x\n" * 10)
        await add_messages(env.core, chat(2))
        env.fake.reply_text(reply("- day", memory_edits=[{"append": "- " + "y" * 40}]))
        env.fake.reply_text(reply("- day", memory_edits=[{"append": "- " + "y" * 40}]))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        second = env.fake.messages_requests()[1]
    assert "MEMORY.md would be 91 characters" in second["messages"][2]["content"]
    assert outcome.status == "failed" and "MEMORY.md would be 91 characters, over its budget of 60" in outcome.reason
    assert memory == "# Memory\n" + "- x\n" * 10
    assert outcome.files == (DAILY,)


# -- daily notes stay bounded ------------------------------------------------------------


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
async def test_a_long_daily_entry_is_sent_back_once_then_cut_with_the_marker(tmp_path: Path, locale: str) -> None:
    word = "咖啡" if locale == "zh-CN" else "coffee "
    async with memory_env(tmp_path, locale=locale, **{"daily-entry-max-chars": 100}) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(reply("- " + word * 60))
        env.fake.reply_text(reply("- " + word * 50))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        note, _ = await env.core.workspace.read_text(1, DAILY)
        follow_up = env.fake.messages_requests()[1]["messages"][2]["content"]
    marker = env.core.prompts.text("truncated_marker")
    entry = note.split("\n\n", 1)[1].rstrip("\n")
    assert "daily_entry" in follow_up and "100" in follow_up
    assert entry.endswith(marker) and len(entry) <= 100 + len(marker)
    assert outcome.status == "completed" and "daily entry cut from" in outcome.reason


async def test_only_the_tail_of_todays_note_reaches_the_prompt(tmp_path: Path) -> None:
    lines = [f"- morning note number {i:03d}" for i in range(400)]
    async with memory_env(tmp_path, **{"daily-context-chars": 500}) as env:
        await env.core.workspace.write(1, DAILY, "# 2026-04-01\n\n" + "\n".join(lines) + "\n")
        await add_messages(env.core, chat(2))
        env.fake.reply_text(reply("- one more"))
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        note, _ = await env.core.workspace.read_text(1, DAILY)
        (request,) = env.fake.messages_requests()
    shown = between(user_prompt(request), "<daily_note>\n", "\n</daily_note>")
    assert len(shown) < 600 and lines[-1] in shown and lines[0] not in shown
    assert "are not shown" in shown
    assert note.startswith("# 2026-04-01\n\n- morning note number 000") and note.endswith("- one more\n")


# -- all or nothing ---------------------------------------------------------------------------


async def test_a_failure_inside_the_commit_leaves_every_file_and_a_retry_appends_once(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await env.core.workspace.write(1, DAILY, "# 2026-04-01\n\n- earlier today\n")
        await add_messages(env.core, chat(2))
        before = [(f.filename, f.version, f.content) for f in await env.core.workspace.list(1)]
        # The run row is the last statement of the commit: fail there, as a full disk would.
        await env.core.db.writer.execute(
            "CREATE TRIGGER fail_commit BEFORE UPDATE OF status ON mate_memory_run "
            "WHEN NEW.status = 'completed' BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
        answer = reply("- met Ann", memory="# Memory\n- Ann lives in Oslo", profile="# Profile\n- Ann")
        env.fake.reply_text(answer)
        with pytest.raises(sqlite3.Error):
            await env.service.analyze_and_update_memory(1, CONVERSATION, attempts=1)
        after = [(f.filename, f.version, f.content) for f in await env.core.workspace.list(1)]
        conversation = await env.core.repos.conversations.get(CONVERSATION)
        injection = await env.core.workspace.injection(1)
        await env.core.db.writer.execute("DROP TRIGGER fail_commit")
        env.fake.reply_text(answer)
        retried = await env.service.analyze_and_update_memory(1, CONVERSATION, attempts=1)
        note, _ = await env.core.workspace.read_text(1, DAILY)
        runs = await env.core.repos.memory_runs.for_conversation(CONVERSATION)
    assert after == before
    assert conversation is not None and conversation.memory_upto_message_id == 0
    assert "Ann lives in Oslo" not in injection
    assert retried.status == "completed"
    assert note == "# 2026-04-01\n\n- earlier today\n\n- met Ann\n"
    assert [r.status for r in runs] == ["failed", "completed"]


async def test_the_commit_completes_the_pending_row_with_the_watermark(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        ids = await add_messages(env.core, chat(2))
        await env.core.repos.memory_pending.upsert(CONVERSATION, 1, ids[-1], "console")
        env.fake.reply_text(reply("- noted"))
        await env.service.analyze_and_update_memory(1, CONVERSATION, upto_message_id=ids[-1])
        pending = await env.core.repos.memory_pending.get(CONVERSATION)
    assert pending is None


async def test_lone_surrogates_in_a_reply_are_stored_safely(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text('{"should_update": true, "reason": "x", "daily_entry": "- bad \\ud800 text",'
                            ' "memory_update": "# Memory\\n- odd \\udfff char", "profile_update": ""}')
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        note, _ = await env.core.workspace.read_text(1, DAILY)
    assert outcome.status == "completed"
    assert memory == "# Memory\n- odd \ufffd char\n"
    assert "- bad \ufffd text" in note


# -- the count is checked again when the analysis runs --------------------------------------------


async def test_an_automatic_run_rechecks_the_message_count(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, [("user", "hello there, how are you"), ("assistant", "fine")])
        skipped = await env.service.analyze_and_update_memory(1, CONVERSATION, recheck=True)
        await add_messages(env.core, [("user", "remember: my bike is blue"), ("assistant", "noted")],
                           conversation_id="console:other")
        env.fake.reply_text(reply("- bike is blue"))
        remembered = await env.service.analyze_and_update_memory(1, "console:other", recheck=True)
    assert (skipped.status, skipped.reason) == ("skipped", "only 2 messages (minimum 4)")
    assert remembered.status == "completed"
    assert len(env.fake.messages_requests()) == 1
