"""SQL for mate_message_fact: the facts an extraction took from a message, found with it by search."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.storage.sql import SqlDatabase, Transaction


@dataclass(frozen=True, slots=True)
class FactLink:
    message_id: int
    fact: str  # one line of a daily-note entry


async def link_facts(conn: Transaction, links: Sequence[FactLink], now: str, run_id: int | None = None) -> None:
    """Inside the caller's transaction. A message deleted meanwhile (an incognito purge) gets no
    fact, and the rest of the transaction goes on. `run_id`: the extraction that took them."""
    if links:
        await conn.executemany(
            "INSERT INTO mate_message_fact(message_id, fact, run_id, create_time) SELECT ?, ?, ?, ? "
            "WHERE EXISTS (SELECT 1 FROM mate_message WHERE id = ?)",
            [(link.message_id, link.fact, run_id, now, link.message_id) for link in links])


async def unlink_run(conn: Transaction, run_id: int) -> None:
    """The facts an extraction took, taken back with it (its undo)."""
    await conn.execute("DELETE FROM mate_message_fact WHERE run_id = ?", (run_id,))


class MessageFactRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def link(self, links: Sequence[FactLink], run_id: int | None = None) -> None:
        async with self._db.transaction() as conn:
            await link_facts(conn, links, self._db.now(), run_id)

    async def of(self, message_id: int) -> list[str]:
        rows = await self._db.fetchall("SELECT fact FROM mate_message_fact WHERE message_id = ? ORDER BY id",
                                       (message_id,))
        return [str(row[0]) for row in rows]
