"""SQL for mate_incognito: a conversation's messages after `after_message_id` are off the record."""

from __future__ import annotations

from dataclasses import dataclass

from bot.storage.sql import SqlDatabase
from bot.storage.remembered import NOT_INCOGNITO

@dataclass(frozen=True, slots=True)
class IncognitoState:
    conversation_id: str
    after_message_id: int
    start_time: str


class IncognitoRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def get(self, conversation_id: str) -> IncognitoState | None:
        row = await self._db.fetchone(
            "SELECT conversation_id, after_message_id, start_time FROM mate_incognito WHERE conversation_id = ?",
            (conversation_id,))
        return IncognitoState(row[0], int(row[1]), row[2]) if row else None

    async def start(self, conversation_id: str) -> bool:
        """Messages stored from now on are incognito; False when it already was."""
        result = await self._db.execute(
            "INSERT INTO mate_incognito(conversation_id, after_message_id, start_time) "
            "SELECT ?, COALESCE(MAX(id), 0), ? FROM mate_message WHERE conversation_id = ? ON CONFLICT DO NOTHING",
            (conversation_id, self._db.now(), conversation_id))
        return result.rowcount == 1

    async def end(self, conversation_id: str) -> int | None:
        """Delete the incognito messages (answers and tool turns too) and end incognito, in one
        transaction; how many of the user's messages went (None when it was not on). A context
        summary that may hold them is dropped too."""
        async with self._db.transaction() as conn:
            row = await conn.fetchone(
                "SELECT after_message_id FROM mate_incognito WHERE conversation_id = ?", (conversation_id,),
            )
            if row is None:
                return None
            after = int(row[0])
            written = await conn.fetchone(
                "SELECT COUNT(*) FROM mate_message WHERE conversation_id = ? AND id > ? AND role = 'user'",
                (conversation_id, after),
            )
            await conn.execute(
                "UPDATE mate_conversation SET summary = NULL, summary_upto_message_id = 0 "
                "WHERE id = ? AND summary_upto_message_id > ?", (conversation_id, after))
            await conn.execute("DELETE FROM mate_message WHERE conversation_id = ? AND id > ?", (conversation_id, after))
            await conn.execute(
                "UPDATE mate_conversation SET message_count = (SELECT COUNT(*) FROM mate_message m "
                "WHERE m.conversation_id = ? AND m.role IN ('user', 'assistant')) WHERE id = ?",
                (conversation_id, conversation_id))
            await conn.execute("DELETE FROM mate_incognito WHERE conversation_id = ?", (conversation_id,))
            return int(written[0]) if written else 0

    async def holds(self, message_id: int) -> bool:
        """Whether the message was written while its conversation was in incognito."""
        row = await self._db.fetchone(
            f"SELECT 1 FROM mate_message m WHERE m.id = ? AND NOT {NOT_INCOGNITO.format(m='m')}", (message_id,))
        return row is not None

    async def started_before(self, cutoff: str) -> list[IncognitoState]:
        rows = await self._db.fetchall(
            "SELECT conversation_id, after_message_id, start_time FROM mate_incognito WHERE start_time <= ? "
            "ORDER BY start_time", (cutoff,))
        return [IncognitoState(r[0], int(r[1]), r[2]) for r in rows]

    async def oldest_start(self) -> str | None:
        row = await self._db.fetchone("SELECT MIN(start_time) FROM mate_incognito")
        return str(row[0]) if row and row[0] is not None else None
