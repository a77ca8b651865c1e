"""Memory emergence's test setup: the service over a tmp database, the fake model and a fixed day."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


from bot.app.core import Core, open_core
from bot.llm import AnthropicClient
from memory.consolidation.emergence import MemoryEmergenceService
from memory.workspace.service import MEMORY_FILE
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic


AGENT = 1
NOW = datetime(2026, 4, 10, 12, 0, tzinfo=timezone.utc)


@dataclass
class Env:
    core: Core
    fake: FakeAnthropic
    service: MemoryEmergenceService

    async def note(self, day: int, text: str) -> None:
        await self.core.workspace.write(AGENT, f"memory/2026-04-{day:02d}.md", f"# 2026-04-{day:02d}\n\n{text}\n")

    async def memory(self) -> tuple[str, int]:
        return await self.core.workspace.read_text(AGENT, MEMORY_FILE)

    async def runs(self) -> list[tuple[str, str, str | None, str | None]]:
        return [(r.kind, r.status, r.reason, r.error) for r in await self.core.repos.memory_runs.recent(AGENT)]

    def user_prompt(self, index: int = 0) -> str:
        content = self.fake.messages_requests()[index]["messages"][0]["content"]
        assert isinstance(content, str)
        return content


def reply(should_update: bool, reason: str, memory_content: str = "") -> str:
    return json.dumps({"should_update": should_update, "reason": reason, "memory_content": memory_content})


async def _no_wait(seconds: float) -> None:
    """The retry policy's waits, skipped: what they are is tested in test_emergence_retry.py."""


async def _env(tmp_path: Path, **memory: Any) -> AsyncIterator[Env]:
    async with FakeAnthropic() as fake:
        config = make_config(
            tmp_path,
            llm={"provider": "anthropic", "api-key": "test-key", "base-url": fake.url, "max-retries": 0,
                 "memory-model": "claude-memory-test"},
            memory={"memory-max-chars": 200, **memory},
        )
        async with open_core(config) as core, AnthropicClient(config.mate.llm) as llm:
            service = MemoryEmergenceService(
                config.mate, core.repos, core.workspace, llm, core.prompts, clock=lambda: NOW, sleep=_no_wait
            )
            yield Env(core, fake, service)
