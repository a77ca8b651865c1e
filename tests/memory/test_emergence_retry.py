"""Emergence retries a failed model call as extraction does, through the real SDK against the fake API."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from bot.app.api.server import ApiServer
from bot.app.core import open_core
from bot.llm import AnthropicClient
from bot.app.runtime import open_runtime
from memory.consolidation.emergence import MemoryEmergenceService
from memory.workspace.service import MEMORY_FILE
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.emergence_env import AGENT, Env, NOW, reply


class Waits:
    """The emergence service's sleep: records the waits it was asked for and returns at once."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)


@pytest.fixture
async def waits() -> Waits:
    return Waits()


@pytest.fixture
async def env(tmp_path: Path, waits: Waits) -> AsyncIterator[Env]:
    async with FakeAnthropic() as fake:
        # max-retries 0: the model client gives up at the first failure, so what is retried
        # here is emergence's own policy, not the client's.
        config = make_config(tmp_path, llm={"provider": "anthropic", "api-key": "test-key", "base-url": fake.url,
                                            "max-retries": 0}, memory={"memory-max-chars": 200})
        async with open_core(config) as core, AnthropicClient(config.mate.llm) as llm:
            service = MemoryEmergenceService(config.mate, core.repos, core.workspace, llm, core.prompts,
                                             clock=lambda: NOW, sleep=waits)
            yield Env(core, fake, service)


@pytest.mark.parametrize(("status", "error_type"), [(529, "overloaded_error"), (500, "api_error")])
async def test_a_model_call_failing_once_is_retried_and_the_run_completes(
    env: Env, waits: Waits, status: int, error_type: str,
) -> None:
    await env.note(9, "plays guitar daily")
    env.fake.reply_error(status, error_type, "busy right now")
    env.fake.reply_text(reply(True, "merged", "# Memory\n- plays guitar\n"))

    outcome = await env.service.emerge(AGENT)

    assert (outcome.status, outcome.updated, outcome.reason) == ("completed", True, "merged")
    first, second = env.fake.messages_requests()
    assert first == second  # the same consolidation asked again
    assert waits.asked == [1.0]  # extraction's first wait
    assert (await env.memory())[0] == "# Memory\n- plays guitar\n"
    failed, completed = sorted(await env.runs(), key=lambda run: run[1] != "failed")
    assert failed[:3] == ("emergence", "failed", "attempt 1/3") and f"HTTP {status}" in (failed[3] or "")
    assert completed == ("emergence", "completed", "merged", None)


async def test_a_model_call_failing_every_time_gives_up_after_three_attempts_and_writes_nothing(
    env: Env, waits: Waits, caplog: pytest.LogCaptureFixture,
) -> None:
    await env.note(9, "a fact")
    before = await env.memory()
    for _ in range(4):
        env.fake.reply_error(529, "overloaded_error", "Overloaded")

    with caplog.at_level(logging.WARNING, logger="memory.consolidation.emergence"):
        outcome = await env.service.emerge(AGENT)

    assert (outcome.status, outcome.updated) == ("failed", False)
    assert "the model call failed" in outcome.reason and "HTTP 529" in outcome.reason
    assert len(env.fake.messages_requests()) == 3 and env.fake.pending() == 1
    assert waits.asked == [1.0, 4.0]
    assert await env.memory() == before
    runs = await env.runs()
    assert sorted(reason or "" for _, _, reason, _ in runs) == ["attempt 1/3", "attempt 2/3", "attempt 3/3"]
    assert {(kind, status) for kind, status, _, _ in runs} == {("emergence", "failed")}
    assert all("HTTP 529" in (error or "") for *_, error in runs)
    gave_up = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(gave_up) == 1 and "gave up after 3 attempts" in gave_up[0].getMessage()
    assert "Traceback" not in caplog.text


async def test_a_malformed_answer_the_client_does_not_retry_is_retried_through_the_api(tmp_path: Path) -> None:
    """The daemon's own wiring: default max-retries, the real runtime and admin API; a 200
    that is no Messages API answer is not retried by the model client, only by emergence."""
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, llm={"api-key": "test-key", "base-url": fake.url}, api={"port": 0})
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt, \
                ApiServer(rt, config.mate.api) as server, aiohttp.ClientSession() as http:
            await rt.core.workspace.write(AGENT, "memory/2026-04-01.md", "# 2026-04-01\n\n- likes tea")
            fake.reply_with(lambda recorded: {"not": "a message"})
            fake.reply_text(reply(True, "tea is stable", "# Memory\n- tea"))
            async with http.post(f"http://127.0.0.1:{server.port}/api/v1/memory/{AGENT}/emergence") as response:
                status, body = response.status, await response.json()
            memory = await rt.core.workspace.get(AGENT, MEMORY_FILE)
            runs = [(r.status, r.reason) for r in await rt.core.repos.memory_runs.recent(AGENT)]

    assert (status, body["data"]) == (200, {"status": "completed", "updated": True, "reason": "tea is stable"})
    assert memory is not None and memory.content == "# Memory\n- tea"
    assert len(fake.messages_requests()) == 2
    assert sorted(runs) == [("completed", "tea is stable"), ("failed", "attempt 1/3")]
