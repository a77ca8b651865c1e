"""Memory extraction's test setup: core over a tmp database, the fake model, the real summarization
service, and the readers of what the model was sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any


from bot.app.core import Core, open_core
from bot.core.config import LlmConfig
from bot.llm import AnthropicClient
from bot.core.retry import MEMORY_MODEL_CALL
from bot.core.clock import Clock
from memory.extraction.summarization import MemorySummarizationService
from memory.worker import MemoryWorker
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic


CONVERSATION = "console:me"
NOON = datetime(2026, 4, 1, 12, 0, tzinfo=timezone.utc)
NO_WAITS = replace(MEMORY_MODEL_CALL, base=0.0, maximum=0.0)  # extraction's tries, without the waits


class ManualClock:
    """A clock the test moves by hand; sleepers (the worker's deferred runs) wake when it passes
    their deadline."""

    def __init__(self, start: datetime = datetime(2026, 4, 1, 9, 0, tzinfo=timezone.utc)) -> None:
        self.now = start
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []

    def __call__(self) -> datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + timedelta(seconds=seconds), future))
        await future

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        for deadline, future in list(self._sleepers):
            if deadline <= self.now and not future.done():
                future.set_result(None)


@dataclass
class MemoryEnv:
    core: Core
    fake: FakeAnthropic
    llm: AnthropicClient
    service: MemorySummarizationService


@asynccontextmanager
async def memory_env(
    tmp_path: Path, *, locale: str = "en", clock: Clock = lambda: NOON, timezone_name: str = "UTC",
    small_model: bool = False, **memory: Any,
) -> AsyncIterator[MemoryEnv]:
    """Core over a tmp SQLite file, the fake Anthropic server, and the real SDK client talking to it."""

    config = make_config(tmp_path, locale=locale, timezone=timezone_name,
                         memory={"cooldown-minutes": 0, **memory})
    async with FakeAnthropic() as fake, open_core(config) as core:
        async with AnthropicClient(LlmConfig(api_key="test-key", base_url=fake.url, max_retries=0)) as llm:
            service = MemorySummarizationService(
                core.config.mate, core.repos, core.workspace, llm, core.prompts, clock, retry=NO_WAITS,
                small_model=small_model,
            )
            yield MemoryEnv(core, fake, llm, service)


@asynccontextmanager
async def worker_running(env: MemoryEnv, clock: ManualClock, **options: Any) -> AsyncIterator[MemoryWorker]:
    """A started worker on the test's clock whose consumer loop runs as a task, closed (rows kept) on exit."""
    worker = MemoryWorker(env.service, env.core.repos, env.core.config.mate, clock=clock,
                          sleep=clock.sleep, **options)
    async with worker:
        loop_task = asyncio.create_task(worker.run(), name="memory-worker")
        try:
            yield worker
        finally:
            loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)


async def add_messages(
    core: Core, rows: Sequence[tuple[str, str] | tuple[str, str, str]], conversation_id: str = CONVERSATION,
    trigger_source: str = "console",
) -> list[int]:
    """Rows are (role, text) or (role, text, content_format)."""
    await core.repos.conversations.create(conversation_id, agent_id=1, channel="console",
                                          chat_key=conversation_id, trigger_source=trigger_source)
    return await core.repos.messages.add_many(
        conversation_id, [(row[0], row[1], 1, *row[2:]) for row in rows])  # type: ignore[misc]


def chat(pairs: int, start: int = 0) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for i in range(start, start + pairs):
        rows += [("user", f"question number {i}"), ("assistant", f"answer number {i}")]
    return rows


def memory_reply(daily: str = "", memory: str = "", profile: str = "", *, should_update: bool = True,
                 reason: str = "worth keeping") -> str:
    return json.dumps({"should_update": should_update, "reason": reason, "daily_entry": daily,
                       "memory_update": memory, "profile_update": profile}, ensure_ascii=False)


def user_prompt(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    return content if isinstance(content, str) else "".join(b["text"] for b in content)


def between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]
