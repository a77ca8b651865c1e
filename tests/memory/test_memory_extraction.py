from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from memory.events import ConversationCompletedEvent
from tests.support.memory_env import CONVERSATION, add_messages, between, chat, memory_env, memory_reply, user_prompt


def event(user_message: str, message_count: int = 6, trigger_source: str = "console") -> ConversationCompletedEvent:
    return ConversationCompletedEvent(1, CONVERSATION, user_message, "reply", message_count, trigger_source)


# -- transcript -----------------------------------------------------------------


async def test_memory_request_holds_the_exact_transcript(tmp_path: Path) -> None:
    tool_turn = json.dumps([{"type": "text", "text": "Let me check."},
                            {"type": "tool_use", "id": "t1", "name": "read", "input": {}}])
    tool_only = json.dumps([{"type": "tool_use", "id": "t2", "name": "read", "input": {}}])
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, [
            ("system", "system note"),
            ("user", "Hi, I am Ann and I live in Oslo"),
            ("assistant", tool_turn, "blocks"),
            ("tool", json.dumps([{"type": "tool_result", "tool_use_id": "t1", "content": "data"}])),
            ("assistant", tool_only, "blocks"),
            ("assistant", "Nice to meet you,\nAnn!"),
            ("user", "x" * 2001),
            ("assistant", "y" * 2000),
        ])
        env.fake.reply_text(memory_reply(should_update=False))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        (request,) = env.fake.messages_requests()
    assert outcome.status == "completed"
    assert request["max_tokens"] == 5334 + 1000 + 256  # both files at their budgets (~3 chars/token), entry, JSON
    transcript = between(user_prompt(request), "<transcript>\n", "\n</transcript>")
    assert transcript == "\n".join([
        "User: Hi, I am Ann and I live in Oslo",
        "Assistant: Let me check.",
        "Assistant: Nice to meet you, Ann!",
        "User: " + "x" * 2000 + "... [truncated]",
        "Assistant: " + "y" * 2000,
    ])
    assert "<earlier_context>" not in user_prompt(request)


async def test_zh_cn_transcript_uses_chinese_labels_and_marker(tmp_path: Path) -> None:
    async with memory_env(tmp_path, locale="zh-CN") as env:
        await add_messages(env.core, [("user", "我叫小明" + "长" * 2000), ("assistant", "你好，小明")])
        env.fake.reply_text(memory_reply(should_update=False))
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        (request,) = env.fake.messages_requests()
    transcript = between(user_prompt(request), "<transcript>\n", "\n</transcript>")
    assert transcript == "用户: 我叫小明" + "长" * 1996 + "... [截断]\n助手: 你好，小明"


# -- pre-checks -----------------------------------------------------------------


@pytest.mark.parametrize(("memory", "evt", "reason"), [
    ({"auto-summarize-enabled": False}, event("a long enough message"), "disabled"),
    ({}, event("a long enough message", trigger_source="cron"), "cron"),
    ({}, event("a long enough message", message_count=3), "only 3 messages"),
    ({}, event("too short"), "9 characters"),
])
async def test_pre_checks_skip_with_a_reason(
    tmp_path: Path, memory: dict[str, Any], evt: ConversationCompletedEvent, reason: str
) -> None:
    async with memory_env(tmp_path, **memory) as env:
        go, why = env.service.should_analyze(evt)
    assert not go
    assert reason in why


async def test_pre_checks_pass_a_normal_exchange_and_cron_when_allowed(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"skip-cron-conversations": False}) as env:
        assert env.service.should_analyze(event("ten chars!")) == (True, "ok")
        assert env.service.should_analyze(event("a long enough message", trigger_source="cron"))[0]


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
@pytest.mark.parametrize("text", ["记住我喜欢喝咖啡", "remember: I'm vegan", "REMEMBER x", "记一下"])
async def test_explicit_remember_bypasses_count_and_length(tmp_path: Path, locale: str, text: str) -> None:
    async with memory_env(tmp_path, locale=locale) as env:
        go, why = env.service.should_analyze(event(text, message_count=2))
        assert (go, why) == (True, "explicit request to remember")
        assert not env.service.should_analyze(event(text, trigger_source="cron"))[0]


async def test_configured_remember_keyword_counts(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"remember-keywords": ["merk dir"]}) as env:
        assert env.service.should_analyze(event("Merk dir: kaffe", message_count=2))[0]
        assert not env.service.should_analyze(event("hei", message_count=2))[0]


# -- parsing and writes ------------------------------------------------------------


@pytest.mark.parametrize("wrap", [
    lambda j: f"```json\n{j}\n```",
    lambda j: f"Sure! Here is what I would keep:\n{j}\nHope that helps.",
])
async def test_fenced_and_chatty_replies_are_parsed(tmp_path: Path, wrap: Any) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(wrap(memory_reply(memory="# Memory\n- Ann works on matebot")))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        content, _ = await env.core.workspace.read_text(1, "MEMORY.md")
    assert (outcome.status, outcome.updated, outcome.files) == ("completed", True, ("MEMORY.md",))
    assert content == "# Memory\n- Ann works on matebot\n"


async def test_invalid_json_is_retried_then_recorded_failed_with_nothing_written(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        ids = await add_messages(env.core, chat(2))
        before = {name: await env.core.workspace.read_text(1, name) for name in ("PROFILE.md", "MEMORY.md")}
        for _ in range(3):
            env.fake.reply_text("I think the user likes coffee.")
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION, upto_message_id=ids[-1])
        after = {name: await env.core.workspace.read_text(1, name) for name in ("PROFILE.md", "MEMORY.md")}
        runs = await env.core.repos.memory_runs.for_conversation(CONVERSATION)
        conversation = await env.core.repos.conversations.get(CONVERSATION)
        daily = await env.core.workspace.get(1, "memory/2026-04-01.md")
    assert (outcome.status, outcome.updated, outcome.retryable) == ("failed", False, True)
    assert "invalid JSON" in outcome.reason
    assert len(env.fake.messages_requests()) == 3
    # The same unusable answer three times: each retry still says what was wrong (S34), never the same request.
    assert len({json.dumps(body, sort_keys=True) for body in env.fake.messages_requests()}) == 3
    assert [(r.kind, r.status) for r in runs] == [("summarize", "failed")] * 3
    assert all(r.error and "invalid JSON" in r.error for r in runs)
    assert after == before and daily is None
    assert conversation is not None and conversation.memory_upto_message_id == 0


async def test_llm_error_is_retried(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_error(529, "overloaded_error", "Overloaded")
        env.fake.reply_text(memory_reply(daily="- talked"))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        runs = await env.core.repos.memory_runs.for_conversation(CONVERSATION)
    assert outcome.status == "completed"
    assert [r.status for r in runs] == ["failed", "completed"]
    assert runs[0].error is not None and "529" in runs[0].error


async def test_profile_and_memory_are_replaced_only_when_non_empty(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        profile_before = await env.core.workspace.read_text(1, "PROFILE.md")
        env.fake.reply_text(memory_reply(profile="   ", memory="# Memory\n- new fact"))
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        assert await env.core.workspace.read_text(1, "PROFILE.md") == profile_before
        memory = await env.core.workspace.get(1, "MEMORY.md")
    assert memory is not None and memory.content == "# Memory\n- new fact\n" and memory.enabled


async def test_daily_note_is_created_with_header_then_appended(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(memory_reply(daily="- first"))
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        await env.core.repos.messages.add_many(CONVERSATION, [("user", "more news today", 1)])
        env.fake.reply_text(memory_reply(daily="- second"))
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        note = await env.core.workspace.get(1, "memory/2026-04-01.md")
        second = user_prompt(env.fake.messages_requests()[1])
    assert note is not None and not note.enabled
    assert note.content == "# 2026-04-01\n\n- first\n\n- second\n"
    # The second run sees the note so far and only the new message as its transcript.
    assert "- first" in between(second, "<daily_note>", "</daily_note>")
    assert between(second, "<transcript>\n", "\n</transcript>") == "User: more news today"
    assert "User: question number 0" in between(second, "<earlier_context>", "</earlier_context>")


async def test_a_full_daily_note_goes_on_in_a_new_part(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"daily-note-max-chars": 1000}) as env:
        await env.core.workspace.write(1, "memory/2026-04-01.md", "# 2026-04-01\n\n" + "- a busy morning\n" * 58)
        before = await env.core.workspace.get(1, "memory/2026-04-01.md")
        for n, entry in enumerate(("- lunch with Ann", "- dinner with Bo")):
            await add_messages(env.core, chat(1, n))
            env.fake.reply_text(memory_reply(daily=entry))
            outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
            assert outcome.files == ("memory/2026-04-01-2.md",)
        first = await env.core.workspace.get(1, "memory/2026-04-01.md")
        second = await env.core.workspace.get(1, "memory/2026-04-01-2.md")
        shown = user_prompt(env.fake.messages_requests()[1])
    assert before is not None and first is not None and first.content == before.content  # left as it was
    assert second is not None and second.content == "# 2026-04-01 (2)\n\n- lunch with Ann\n\n- dinner with Bo\n"
    assert "- lunch with Ann" in between(shown, "<daily_note>", "</daily_note>")  # the part being written


async def test_daily_note_date_follows_the_configured_time_zone(tmp_path: Path) -> None:
    late = datetime(2026, 4, 1, 23, 30, tzinfo=timezone.utc)
    async with memory_env(tmp_path, clock=lambda: late, timezone_name="Asia/Shanghai") as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(memory_reply(daily="- late chat"))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
    assert outcome.files == ("memory/2026-04-02.md",)


async def test_nothing_to_keep_moves_the_watermark_and_a_rerun_is_skipped(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        ids = await add_messages(env.core, chat(2))
        env.fake.reply_text(memory_reply(should_update=False, reason="small talk"))
        first = await env.service.analyze_and_update_memory(1, CONVERSATION)
        second = await env.service.analyze_and_update_memory(1, CONVERSATION)
        runs = await env.core.repos.memory_runs.for_conversation(CONVERSATION)
    assert (first.status, first.updated, first.reason, first.watermark) == ("completed", False, "small talk", ids[-1])
    assert second.status == "skipped"
    assert len(env.fake.messages_requests()) == 1
    assert [r.status for r in runs] == ["completed", "skipped"]


async def test_over_budget_update_is_sent_back_once_then_not_written(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"profile-max-chars": 50}) as env:
        await add_messages(env.core, chat(2))
        profile_before = await env.core.workspace.read_text(1, "PROFILE.md")
        first = memory_reply(daily="- met Ann", profile="p" * 80)
        env.fake.reply_text(first)
        env.fake.reply_text(memory_reply(daily="- met Ann", profile="q" * 60))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        profile_after = await env.core.workspace.read_text(1, "PROFILE.md")
        runs = await env.core.repos.memory_runs.for_conversation(CONVERSATION)
        requests = env.fake.messages_requests()
    assert len(requests) == 2
    follow_up = requests[1]["messages"]
    assert [m["role"] for m in follow_up] == ["user", "assistant", "user"]
    assert follow_up[1]["content"] == first
    assert "PROFILE.md would be 80 characters" in follow_up[2]["content"] and "50" in follow_up[2]["content"]
    assert profile_after == profile_before
    assert outcome.status == "failed" and not outcome.retryable
    assert "PROFILE.md would be 60 characters, over its budget of 50" in outcome.reason
    assert outcome.files == ("memory/2026-04-01.md",)  # the valid fields are still kept
    assert runs[-1].status == "failed" and runs[-1].reason == outcome.reason


async def test_shortened_update_within_budget_is_written(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"memory-max-chars": 40}) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(memory_reply(memory="m" * 100))
        env.fake.reply_text(memory_reply(memory="short memory"))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        content, _ = await env.core.workspace.read_text(1, "MEMORY.md")
    assert (outcome.status, content) == ("completed", "short memory\n")


async def test_concurrent_edit_during_slow_extraction_survives(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(memory_reply(memory="# Memory\n- from stale contents"), delay=0.4)
        env.fake.reply_text(memory_reply(memory="# Memory\n- edited by hand\n- merged fact"))
        task = asyncio.create_task(env.service.analyze_and_update_memory(1, CONVERSATION))
        while not env.fake.requests:
            await asyncio.sleep(0.01)
        await env.core.workspace.write(1, "MEMORY.md", "# Memory\n- edited by hand\n")
        outcome = await task
        content, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        requests = env.fake.messages_requests()
    assert len(requests) == 2
    assert "- edited by hand" not in user_prompt(requests[0])
    assert "- edited by hand" in between(user_prompt(requests[1]), "<memory>", "</memory>")
    assert outcome.status == "completed"
    assert content == "# Memory\n- edited by hand\n- merged fact\n"


async def test_seventy_unanalysed_messages_are_caught_up_in_batches(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        ids = await add_messages(env.core, chat(35))
        for n in range(3):
            env.fake.reply_text(memory_reply(daily=f"- batch {n}"))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        conversation = await env.core.repos.conversations.get(CONVERSATION)
        note, _ = await env.core.workspace.read_text(1, "memory/2026-04-01.md")
        requests = env.fake.messages_requests()
    assert len(requests) == 3
    transcripts = [between(user_prompt(r), "<transcript>\n", "\n</transcript>").split("\n") for r in requests]
    assert [len(t) for t in transcripts] == [30, 30, 10]
    assert transcripts[0][0] == "User: question number 0" and transcripts[2][-1] == "Assistant: answer number 34"
    assert "Assistant: answer number 14" in user_prompt(requests[1]).split("<earlier_context>")[1]
    assert conversation is not None and conversation.memory_upto_message_id == ids[-1]
    assert outcome.watermark == ids[-1] and outcome.reason.startswith("3 batches")
    assert note == "# 2026-04-01\n\n- batch 0\n\n- batch 1\n\n- batch 2\n"
