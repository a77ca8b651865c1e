"""Memory changes keep the cache: a conversation keeps the memory files its cached prefix was built
with while that cache is warm, and what changed since reaches the model with the current message."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.llm.memory_snapshot import MAX_NOTE_CHARS, MemorySnapshots, injected_files, memory_changes
from bot.llm import AnthropicClient
from bot.core.prompts import PromptLibrary
from bot.app.runtime import Runtime, open_runtime
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.cache_env import Moment, START, chat_requests, lifetimes
from tests.support.memory_env import memory_reply
from tests.support.messages import blocks
from tests.support.runtime import chat

CONVERSATION = "console:me"
NOTE_START = "[Memory updated since this conversation started"


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@asynccontextmanager
async def running(tmp_path: Path, fake: FakeAnthropic, moment: Moment, cache: str = "auto") -> AsyncIterator[Runtime]:
    config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0, "cache": cache})
    fake.now = moment.seconds
    async with AnthropicClient(config.mate.llm) as client, open_runtime(config, llm=client, clock=moment) as rt:
        yield rt
        assert await rt.router.drain(10)  # the memory events of the last turns are stored before closing


def system_text(body: dict[str, Any]) -> str:
    """The system prompt's words (its cache_control lifetimes aside)."""
    system = body["system"]
    return system if isinstance(system, str) else "".join(block["text"] for block in system)


def strip_marks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's blocks without their cache_control breakpoints."""
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks(message)]


def first_block(body: dict[str, Any]) -> str:
    return str(blocks(body["messages"][-1])[0].get("text", ""))


async def extract(rt: Runtime, fake: FakeAnthropic, **update: str) -> None:
    services = rt.memory_services
    assert services is not None
    fake.reply_text(memory_reply(**update))
    outcome = await services.worker.summarize_now(1, CONVERSATION)
    assert outcome.status == "completed", outcome


async def test_the_turn_after_an_extraction_sees_the_change_and_the_system_prompt_stays(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment) as rt:
        fake.reply_text("Nice garden.")
        await chat(rt, "I grow tomatoes and I moved to Lisbon last week.")
        await extract(rt, fake, profile="# User profile\n\n- Lives in Lisbon.\n- Grows tomatoes.\n")
        for text in ("where do I live?", "and what do I grow?"):
            moment.wait(minutes=3)
            fake.reply_text("You told me.")
            await chat(rt, text)
        moment.wait(hours=2)  # the cache has expired: the next turn builds its prompt afresh
        fake.reply_text("Lisbon.")
        await chat(rt, "remind me where I live?")

    bodies = [r.body for r in chat_requests(fake) if r.body.get("system") and "tools" in r.body]
    assert len(bodies) == 4
    assert "Lives in Lisbon" not in system_text(bodies[0])
    assert system_text(bodies[1]) == system_text(bodies[0]) == system_text(bodies[2])
    for body in bodies[1:3]:  # every turn while the snapshot is kept carries what changed
        note = first_block(body)
        assert note.startswith(NOTE_START) and "PROFILE.md" in note and "added: - Lives in Lisbon." in note
        assert "where do I live?" not in note
    assert lifetimes(bodies[1]) == lifetimes(bodies[2]) == {"1h"}  # the prefix stayed: kept for the hour
    assert "Lives in Lisbon" in system_text(bodies[3])
    assert not first_block(bodies[3]).startswith(NOTE_START)
    # The note stays with the message it was sent with: the next turn sends that message again
    # word for word (SPEC S34), so the cached prefix still matches.
    assert json.dumps(bodies[2]["messages"][:-1]).count(NOTE_START) == 1
    assert strip_marks(bodies[2]["messages"][-3]) == strip_marks(bodies[1]["messages"][-1])


async def test_a_new_conversation_and_a_new_day_rebuild_the_prompt(tmp_path: Path, fake: FakeAnthropic) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment) as rt:
        fake.reply_text("ok")
        await chat(rt, "I have a cat called Miso.")
        await extract(rt, fake, memory="# Core memory\n\n- Has a cat called Miso.\n")
        fake.reply_text("ok")
        await chat(rt, "/new")
        moment.now = datetime(START.year, START.month, START.day, 23, 50, tzinfo=START.tzinfo)
        fake.reply_text("Miso.")
        await chat(rt, "what is my cat called?")
        await rt.core.workspace.write(1, "MEMORY.md", "# Core memory\n\n- Has a cat called Miso.\n- Likes jazz.\n")
        moment.wait(minutes=4)  # within the new conversation's first (5-minute) cache
        fake.reply_text("ok")
        await chat(rt, "good night")
        moment.wait(minutes=7)  # past midnight, cache still warm (an hour now): the date in the prompt changes
        fake.reply_text("ok")
        await chat(rt, "good morning")

    bodies = [r.body for r in chat_requests(fake) if "tools" in r.body]
    after_new, before_midnight, after_midnight = bodies[-3:]
    assert "Has a cat called Miso" in system_text(after_new) and not first_block(after_new).startswith(NOTE_START)
    assert "Likes jazz" not in system_text(before_midnight) and "added: - Likes jazz." in first_block(before_midnight)
    assert "Likes jazz" in system_text(after_midnight) and not first_block(after_midnight).startswith(NOTE_START)


async def test_with_caching_off_every_turn_sends_the_current_files(tmp_path: Path, fake: FakeAnthropic) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment, cache="off") as rt:
        fake.reply_text("ok")
        await chat(rt, "I moved to Lisbon.")
        await rt.core.workspace.write(1, "PROFILE.md", "# User profile\n\n- Lives in Lisbon.\n")
        moment.wait(minutes=1)
        fake.reply_text("ok")
        await chat(rt, "where do I live?")
    last = [r.body for r in chat_requests(fake)][-1]
    assert "Lives in Lisbon" in system_text(last) and not first_block(last).startswith(NOTE_START)


def test_changes_are_read_per_file_as_lines_added_and_removed() -> None:
    base = "You are Mate."
    before = f"{base}\n\n--- MEMORY.md ---\n# Memory\n- likes tea\n\n--- PROFILE.md ---\n# Profile\n- lives in Porto"
    after = f"{base}\n\n--- MEMORY.md ---\n# Memory\n- likes tea\n- has a cat\n\n--- PROFILE.md ---\n# Profile\n" \
            f"- lives in Lisbon\n\n--- memory/2026-03-04.md ---\n- went running"
    split = len(base)
    changes = memory_changes(injected_files(before, split), injected_files(after, split))
    assert [(c.filename, c.added, c.removed) for c in changes] == [
        ("MEMORY.md", ("- has a cat",), ()),
        ("PROFILE.md", ("- lives in Lisbon",), ("- lives in Porto",)),
        ("memory/2026-03-04.md", ("- went running",), ()),
    ]
    assert memory_changes(injected_files(before, split), injected_files(before, split)) == []
    zh = PromptLibrary("zh-CN").render("agent/memory-updated", changes=changes)
    assert "新增：- has a cat" in zh and "删除：- lives in Porto" in zh


def test_a_change_too_large_for_a_note_rebuilds_the_prompt() -> None:
    snapshots = MemorySnapshots(lambda changes: "\n".join(line for c in changes for line in c.added))
    now = START
    old = "Base\n\n--- MEMORY.md ---\n- one"
    assert snapshots.choose("c", old, 4, None, compacted=False, now=now).system == old
    snapshots.sent("c", "5m", now)
    small = old + "\n- two"
    kept = snapshots.choose("c", small, 4, None, compacted=False, now=now + timedelta(minutes=1))
    assert kept.system == old and [c.added for c in kept.changes] == [("- two",)]
    large = old + "\n" + "\n".join(f"- fact {i} " + "x" * 40 for i in range(MAX_NOTE_CHARS // 40))
    assert snapshots.choose("c", large, 4, None, compacted=False, now=now + timedelta(minutes=2)).system == large
    snapshots.sent("c", "5m", now + timedelta(minutes=2))
    assert snapshots.choose("c", old, 4, None, compacted=True, now=now + timedelta(minutes=3)).system == old
