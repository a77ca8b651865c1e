"""Memory extraction's test setup: core over a tmp database, the fake model, the real summarization
service, and the readers of what the model was sent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


from bot.app.core import Core, open_core
from bot.core.config import LlmConfig
from bot.llm import AnthropicClient
from bot.core.retry import MEMORY_MODEL_CALL
from bot.core.clock import Clock
from memory.extraction.summarization import MemorySummarizationService
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic


CONVERSATION = "console:me"
NOON = datetime(2026, 4, 1, 12, 0, tzinfo=timezone.utc)
NO_WAITS = replace(MEMORY_MODEL_CALL, base=0.0, maximum=0.0)  # extraction's tries, without the waits


@dataclass
class MemoryEnv:
    core: Core
    fake: FakeAnthropic
    llm: AnthropicClient
    service: MemorySummarizationService


@asynccontextmanager
async def memory_env(
    tmp_path: Path, *, locale: str = "en", clock: Clock = lambda: NOON, timezone_name: str = "UTC",
    **memory: Any,
) -> AsyncIterator[MemoryEnv]:
    """Core over a tmp SQLite file, the fake Anthropic server, and the real SDK client talking to it."""

    config = make_config(tmp_path, locale=locale, timezone=timezone_name,
                         memory={"cooldown-minutes": 0, **memory})
    async with FakeAnthropic() as fake, open_core(config) as core:
        async with AnthropicClient(LlmConfig(api_key="test-key", base_url=fake.url, max_retries=0)) as llm:
            service = MemorySummarizationService(
                core.config.mate, core.repos, core.workspace, llm, core.prompts, clock, retry=NO_WAITS
            )
            yield MemoryEnv(core, fake, llm, service)


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
