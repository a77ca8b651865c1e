"""open_runtime's clock: the agent and the memory work keep the time they are given, not the wall clock.

Through the whole pipeline (router, agent, memory worker) against the fake Messages API; the
clock is fixed years away from today, so a piece still on the wall clock shows at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bot.llm import AnthropicClient
from bot.app.runtime import open_runtime
from channels.base import InboundMessage
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, system_text

MOMENT = datetime(2031, 5, 6, 9, 15, tzinfo=timezone.utc)  # a Tuesday


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


async def test_the_agent_and_the_memory_worker_keep_the_given_clock(tmp_path: Path, fake: FakeAnthropic) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
                         memory={"min-messages-for-summarize": 1})
    async with AnthropicClient(config.mate.llm) as llm, \
            open_runtime(config, llm=llm, clock=lambda: MOMENT, sleep=sleep) as rt:
        reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", "what day is it today?"))
        assert reply is not None
        assert await rt.router.drain(30)
        stored = await rt.core.repos.messages.after("console:me", 0)
        pending = await rt.core.repos.memory_pending.all()

    chat = [r for r in fake.requests if r.path == "/v1/messages"][0]
    assert "2031-05-06, Tuesday (UTC)" in system_text(chat.body)
    # the user's message is stored at the agent's moment (the reply's time is the database's own)
    assert stored[0].role == "user" and stored[0].create_time.startswith("2031-05-06T09:15")
    assert pending and all(p.due_time.startswith("2031-05-06T09:15") for p in pending)
