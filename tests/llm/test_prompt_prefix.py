"""The prompt is ordered for prefix reuse (SPEC S34): tools, the base prompt, AGENTS.md and SOUL.md,
then the files that change; and each turn re-sends the earlier turns word for word."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.app.runtime import Runtime, open_runtime
from bot.llm import AnthropicClient
from tests.support.cache_env import Moment, chat_requests
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.messages import blocks
from tests.support.runtime import chat


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@asynccontextmanager
async def running(tmp_path: Path, fake: FakeAnthropic, moment: Moment) -> AsyncIterator[Runtime]:
    config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0})
    fake.now = moment.seconds
    async with AnthropicClient(config.mate.llm) as client, open_runtime(config, llm=client, clock=moment) as rt:
        yield rt
        assert await rt.router.drain(10)


def unmarked(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The messages' blocks without their cache_control breakpoints (those move each turn)."""
    return [[{k: v for k, v in b.items() if k != "cache_control"} for b in blocks(m)] for m in messages]


async def test_the_system_prompt_puts_the_files_that_change_last(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, Moment()) as rt:
        fake.reply_text("Hi!")
        await chat(rt, "hello")
    (body,) = [r.body for r in chat_requests(fake) if r.body.get("tools")]

    assert body["tools"]  # the Messages API reads tools first, then the system blocks
    base, files = (block["text"] for block in body["system"])  # the breakpoint after the base prompt
    assert base.startswith("You are Mate")
    order = [files.index(f"--- {name} ---") for name in ("AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md")]
    assert order == sorted(order)
    assert "--- AGENTS.md ---" not in base


async def test_each_turn_sends_the_earlier_turns_as_they_were_sent(tmp_path: Path, fake: FakeAnthropic) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment) as rt:
        for text in ("I live in Lisbon.", "I grow tomatoes.", "what do you know about me?"):
            fake.reply_text(f"ok: {text}")
            await chat(rt, text)
            moment.wait(minutes=2)
    bodies = [r.body for r in chat_requests(fake) if r.body.get("tools")]

    assert len(bodies) == 3
    for before, after in zip(bodies, bodies[1:]):
        sent = unmarked(before["messages"])
        # the last request's messages, the current one with its time label, open the next one
        assert unmarked(after["messages"])[:len(sent)] == sent
        assert sent[-1][0]["text"].startswith("[2026-03-04 09:0")
    assert bodies[1]["system"] == bodies[2]["system"] and bodies[0]["tools"] == bodies[2]["tools"]
