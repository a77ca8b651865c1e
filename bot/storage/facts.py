"""SQL for mate_message_fact: the facts an extraction took from a message, found with it by search."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.storage.sql import SqlDatabase, Transaction


@dataclass(frozen=True, slots=True)
class FactLink:
    message_id: int
    fact: str  # one line of a daily-note entry


async def link_facts(conn: Transaction, links: Sequence[FactLink], now: str) -> None:
    """Inside the caller's transaction. A message deleted meanwhile (an incognito purge) gets no
    fact, and the rest of the transaction goes on."""
    if links:
        await conn.executemany(
            "INSERT INTO mate_message_fact(message_id, fact, create_time) SELECT ?, ?, ? "
            "WHERE EXISTS (SELECT 1 FROM mate_message WHERE id = ?)",
            [(link.message_id, link.fact, now, link.message_id) for link in links])


class MessageFactRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def link(self, links: Sequence[FactLink]) -> None:
        async with self._db.transaction() as conn:
            await link_facts(conn, links, self._db.now())

    async def of(self, message_id: int) -> list[str]:
        rows = await self._db.fetchall("SELECT fact FROM mate_message_fact WHERE message_id = ? ORDER BY id",
                                       (message_id,))
        return [str(row[0]) for row in rows]
