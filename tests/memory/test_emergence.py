"""MemoryEmergenceService against real SQLite and the real anthropic SDK on the fake API (SPEC S8)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app.core import open_core
from bot.llm import AnthropicClient
from memory.consolidation.emergence import MemoryEmergenceService
from memory.workspace.service import MEMORY_FILE
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, system_text
from tests.support.emergence_env import AGENT, Env, NOW, _env, reply


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async for opened in _env(tmp_path):
        yield opened


async def test_request_layout_and_memory_replacement(env: Env) -> None:
    for day in range(1, 10):  # nine notes: only the seven newest may be sent
        await env.note(day, f"fact of day {day}")
    await env.core.workspace.write(AGENT, "memory/notes-x.md", "not a daily note")
    await env.core.workspace.write(AGENT, "memory/2026-04-31.md", "not a real date")
    await env.core.workspace.write(AGENT, MEMORY_FILE, "# Memory\n- old fact\n")
    _, before = await env.memory()
    env.fake.reply_text(reply(True, "merged the week", "# Memory\n- consolidated\n"))

    outcome = await env.service.emerge(AGENT)

    assert (outcome.status, outcome.updated, outcome.reason) == ("completed", True, "merged the week")
    [body] = env.fake.messages_requests()
    assert body["model"] == "claude-memory-test"
    assert body["max_tokens"] >= 200
    assert "within 200 characters" in system_text(body)
    user = env.user_prompt()
    assert "Today's date: 2026-04-10" in user
    assert "# Memory\n- old fact" in user
    assert "## Current MEMORY.md (20 / 200 characters)" in user
    blocks = [f"### memory/2026-04-{d:02d}.md\n# 2026-04-{d:02d}\n\nfact of day {d}" for d in range(9, 2, -1)]
    assert "<daily_notes>\n" + "\n\n".join(blocks) + "\n</daily_notes>" in user
    for absent in ("fact of day 2", "fact of day 1", "notes-x", "not a daily note", "2026-04-31"):
        assert absent not in user
    assert await env.memory() == ("# Memory\n- consolidated\n", before + 1)
    assert await env.runs() == [("emergence", "completed", "merged the week", None)]


async def test_a_day_in_several_parts_counts_as_one_day_and_is_read_whole(env: Env) -> None:
    for day in range(1, 10):
        await env.note(day, f"fact of day {day}")
    for day, part in ((9, 3), (9, 2), (3, 2)):
        await env.core.workspace.write(AGENT, f"memory/2026-04-{day:02d}-{part}.md",
                                       f"# 2026-04-{day:02d} ({part})\n\nmore of day {day}, part {part}\n")
    env.fake.reply_text(reply(False, "nothing new"))

    await env.service.emerge(AGENT)

    user = env.user_prompt()
    names = [line[4:] for line in user.splitlines() if line.startswith("### memory/")]
    assert names == ["memory/2026-04-09.md", "memory/2026-04-09-2.md", "memory/2026-04-09-3.md",
                     *(f"memory/2026-04-{d:02d}.md" for d in range(8, 3, -1)), "memory/2026-04-03.md",
                     "memory/2026-04-03-2.md"]


async def test_should_update_false_changes_nothing(env: Env) -> None:
    await env.note(9, "nothing durable")
    before = await env.memory()
    env.fake.reply_text(reply(False, "already up to date", "ignored text"))

    outcome = await env.service.emerge(AGENT)

    assert (outcome.status, outcome.updated, outcome.reason) == ("completed", False, "already up to date")
    assert await env.memory() == before
    assert await env.runs() == [("emergence", "completed", "already up to date", None)]


async def test_update_with_empty_content_is_not_an_update(env: Env) -> None:
    await env.note(9, "something")
    before = await env.memory()
    env.fake.reply_text(reply(True, "cleaned up", "   "))

    outcome = await env.service.emerge(AGENT)

    assert (outcome.status, outcome.updated) == ("completed", False)
    assert "no memory_content" in outcome.reason
    assert await env.memory() == before


async def test_disabled_makes_no_call_and_no_run(tmp_path: Path) -> None:
    async for env in _env(tmp_path, **{"emergence-enabled": False}):
        await env.note(9, "a fact")
        outcome = await env.service.emerge(AGENT)
        assert (outcome.status, outcome.updated) == ("disabled", False)
        assert env.fake.requests == []
        assert await env.runs() == []


async def test_no_daily_notes_is_skipped_without_a_call(env: Env) -> None:
    await env.core.workspace.write(AGENT, "memory/notes-x.md", "not a daily note")
    # A blank daily note is nothing to consolidate either.
    await env.core.workspace.write(AGENT, "memory/2026-04-08.md", "  \n")

    outcome = await env.service.emerge(AGENT)

    assert (outcome.status, outcome.updated) == ("skipped", False)
    assert env.fake.requests == []
    assert [(kind, status) for kind, status, _, _ in await env.runs()] == [("emergence", "skipped")]


async def test_invalid_json_three_times_fails_and_writes_nothing(env: Env) -> None:
    await env.note(9, "a fact")
    before = await env.memory()
    for text in ("not json", "{broken", '{"reason": "no flag"}', reply(True, "never read", "x")):
        env.fake.reply_text(text)

    outcome = await env.service.emerge(AGENT)

    assert (outcome.status, outcome.updated) == ("failed", False)
    assert "invalid JSON" in outcome.reason and "3 attempts" in outcome.reason
    assert len(env.fake.messages_requests()) == 3
    assert env.fake.pending() == 1
    assert await env.memory() == before
    [(kind, status, reason, error)] = await env.runs()
    assert (kind, status, reason, error) == ("emergence", "failed", outcome.reason, outcome.reason)


async def test_fenced_json_after_one_invalid_reply_is_accepted(env: Env) -> None:
    await env.note(9, "a fact")
    env.fake.reply_text("Sure!")
    env.fake.reply_text("Here:\n```json\n" + reply(True, "ok", "# Memory\n- a fact\n") + "\n```")

    outcome = await env.service.emerge(AGENT)

    assert (outcome.status, outcome.updated) == ("completed", True)
    assert (await env.memory())[0] == "# Memory\n- a fact\n"


async def test_llm_error_on_every_attempt_fails_and_writes_nothing(env: Env) -> None:
    await env.note(9, "a fact")
    before = await env.memory()
    for _ in range(3):  # a failed model call is retried as in extraction: three tries in all
        env.fake.reply_error(500, "api_error", "boom")

    outcome = await env.service.emerge(AGENT)

    assert outcome.status == "failed"
    assert "HTTP 500" in outcome.reason
    assert len(env.fake.messages_requests()) == 3
    assert await env.memory() == before


async def test_over_budget_asks_once_to_shorten_then_fails(env: Env) -> None:
    await env.note(9, "a fact")
    before = await env.memory()
    first = reply(True, "long", "x" * 250)
    env.fake.reply_text(first)
    env.fake.reply_text(reply(True, "still long", "y" * 230))

    outcome = await env.service.emerge(AGENT)

    assert (outcome.status, outcome.updated) == ("failed", False)
    assert "230 characters" in outcome.reason and "budget of 200" in outcome.reason
    first_body, second_body = env.fake.messages_requests()
    assert second_body["messages"][:2] == [first_body["messages"][0], {"role": "assistant", "content": first}]
    shorten = second_body["messages"][2]
    assert shorten["role"] == "user"
    assert "MEMORY.md would be 250 characters" in shorten["content"]
    assert "budget of 200 characters" in shorten["content"]
    assert await env.memory() == before
    assert [(s, r) for _, s, r, _ in await env.runs()] == [("failed", outcome.reason)]


async def test_shortened_reply_within_budget_is_written(env: Env) -> None:
    await env.note(9, "a fact")
    env.fake.reply_text(reply(True, "long", "x" * 250))
    env.fake.reply_text(reply(True, "shorter", "# Memory\n- short\n"))

    outcome = await env.service.emerge(AGENT)

    assert (outcome.status, outcome.updated, outcome.reason) == ("completed", True, "shorter")
    assert (await env.memory())[0] == "# Memory\n- short\n"


async def _wait_for_requests(fake: FakeAnthropic, count: int) -> None:
    for _ in range(500):
        if len(fake.messages_requests()) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the fake never received {count} requests")


async def test_edit_during_a_slow_call_is_not_overwritten(env: Env) -> None:
    await env.note(9, "a fact")
    env.fake.reply_text(reply(True, "stale", "# Memory\n- from the stale read\n"), delay=0.3)
    env.fake.reply_text(reply(True, "fresh", "# Memory\n- kept the user's edit\n- a fact\n"))

    task = asyncio.create_task(env.service.emerge(AGENT))
    await _wait_for_requests(env.fake, 1)
    edited = await env.core.workspace.write(AGENT, MEMORY_FILE, "# Memory\n- edited by the user\n")
    outcome = await task

    assert (outcome.status, outcome.updated, outcome.reason) == ("completed", True, "fresh")
    assert len(env.fake.messages_requests()) == 2
    assert "edited by the user" not in env.user_prompt(0)
    assert "# Memory\n- edited by the user" in env.user_prompt(1)
    assert await env.memory() == ("# Memory\n- kept the user's edit\n- a fact\n", edited.file.version + 1)
    assert len(await env.runs()) == 1


async def test_second_concurrent_edit_fails_and_keeps_the_newer_text(env: Env) -> None:
    await env.note(9, "a fact")
    for reason in ("first", "second"):
        env.fake.reply_text(reply(True, reason, f"# Memory\n- {reason} proposal\n"), delay=0.3)

    task = asyncio.create_task(env.service.emerge(AGENT))
    for count, text in ((1, "edit one"), (2, "edit two")):
        await _wait_for_requests(env.fake, count)
        await env.core.workspace.write(AGENT, MEMORY_FILE, f"# Memory\n- {text}\n")
    outcome = await task

    assert (outcome.status, outcome.updated) == ("failed", False)
    assert "changed by another writer" in outcome.reason
    assert (await env.memory())[0] == "# Memory\n- edit two\n"


@pytest.mark.parametrize(("locale", "expected"), [("en", 4000 + 512), ("zh-CN", 12000 + 512)])
async def test_max_tokens_fits_a_complete_memory_at_its_budget(tmp_path: Path, locale: str, expected: int) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path / locale, locale=locale,
                             llm={"provider": "anthropic", "api-key": "k", "base-url": fake.url, "max-retries": 0})
        async with open_core(config) as core, AnthropicClient(config.mate.llm) as llm:
            await core.workspace.write(AGENT, "memory/2026-04-09.md", "# 2026-04-09\n\n- a fact\n")
            fake.reply_text(reply(False, "fine"))
            await MemoryEmergenceService(config.mate, core.repos, core.workspace, llm, core.prompts,
                                         clock=lambda: NOW).emerge(AGENT)
        (request,) = fake.messages_requests()
    assert request["max_tokens"] == expected


async def test_a_cut_off_reply_is_asked_again_for_edits(env: Env) -> None:
    await env.note(9, "plays guitar daily")
    await env.core.workspace.write(AGENT, MEMORY_FILE, "# Memory\n- plays piano\n")
    env.fake.reply_text(reply(True, "rewrite", "# Memory\n- wiped"), stop_reason="max_tokens")
    env.fake.reply_text(json.dumps({"should_update": True, "reason": "edited", "memory_content": "",
                                    "memory_edits": [{"old": "- plays piano", "new": "- plays guitar"}]}))
    outcome = await env.service.emerge(AGENT)
    assert (outcome.status, outcome.updated) == ("completed", True)
    assert (await env.memory())[0] == "# Memory\n- plays guitar\n"
    follow_up = env.fake.messages_requests()[1]["messages"][2]["content"]
    assert "cut off" in follow_up and "memory_edits" in follow_up


async def test_cut_off_twice_fails_and_keeps_memory(env: Env) -> None:
    await env.note(9, "a fact")
    before = await env.memory()
    env.fake.reply_text(reply(True, "one", "# Memory\n- a"), stop_reason="max_tokens")
    env.fake.reply_text(reply(True, "two", "# Memory\n- b"), stop_reason="max_tokens")
    outcome = await env.service.emerge(AGENT)
    assert outcome.status == "failed" and "cut off at max_tokens" in outcome.reason
    assert await env.memory() == before
