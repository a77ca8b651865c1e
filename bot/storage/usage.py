"""SQL for mate_llm_usage: what each model call was billed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from bot.storage.sql import SqlDatabase


@dataclass(frozen=True, slots=True)
class LlmUsageRecord:
    purpose: str  # chat | summary | memory | emergence
    model: str
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    output_tokens: int
    agent_id: int | None = None
    conversation_id: str | None = None


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """The sums of one purpose over a period."""

    purpose: str
    calls: int
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    output_tokens: int

    @property
    def prompt_tokens(self) -> int:
        """Every input token of the period, however it was billed."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


class LlmUsageRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    def queue(self, usage: LlmUsageRecord) -> asyncio.Future[list[Any]]:
        """Queued into the next group commit: the reply does not wait for the bookkeeping."""
        return self._db.queue_returning(
            "INSERT INTO mate_llm_usage(agent_id, conversation_id, purpose, model, input_tokens, "
            "cache_creation_input_tokens, cache_read_input_tokens, output_tokens, create_time) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (usage.agent_id, usage.conversation_id, usage.purpose, usage.model, usage.input_tokens,
             usage.cache_creation_input_tokens, usage.cache_read_input_tokens, usage.output_tokens, self._db.now()),
        )

    async def totals_since(self, since: str, agent_id: int | None = None) -> list[UsageTotals]:
        """Per purpose, calls since `since` (a stored UTC time), most tokens first."""
        where, params = "create_time >= ?", list[object]([since])
        if agent_id is not None:
            where += " AND agent_id = ?"
            params.append(agent_id)
        rows = await self._db.fetchall(
            "SELECT purpose, COUNT(*) AS calls, SUM(input_tokens) AS input, "
            "SUM(cache_creation_input_tokens) AS creation, SUM(cache_read_input_tokens) AS cache_read, "
            f"SUM(output_tokens) AS output FROM mate_llm_usage WHERE {where} GROUP BY purpose "
            "ORDER BY SUM(input_tokens + cache_creation_input_tokens + cache_read_input_tokens) DESC, purpose",
            params,
        )
        return [UsageTotals(r["purpose"], int(r["calls"]), int(r["input"] or 0), int(r["creation"] or 0),
                            int(r["cache_read"] or 0), int(r["output"] or 0)) for r in rows]
