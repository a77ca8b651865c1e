"""SQL for mate_memory_pending (durable extraction queue) and mate_memory_run (audit)."""

from __future__ import annotations

from typing import Any

from bot.storage.sql import SqlDatabase

# The lease a daemon holds while it runs an agent's memory work (bot/storage/leases.py): "memory:<agent id>".
MEMORY_LEASE_PREFIX = "memory:"
from bot.storage.remembered import NOT_INCOGNITO
from bot.core.records import MemoryRunRecord, PendingMemoryRecord, UnanalysedConversation

_PENDING_COLUMNS = "conversation_id, agent_id, upto_message_id, trigger_source, attempts, due_time, last_error"
_RUN_COLUMNS = "id, agent_id, kind, conversation_id, status, reason, started, finished, error"


def _pending(row: Any) -> PendingMemoryRecord:
    return PendingMemoryRecord(
        conversation_id=row["conversation_id"], agent_id=row["agent_id"],
        upto_message_id=row["upto_message_id"], trigger_source=row["trigger_source"],
        attempts=row["attempts"], due_time=row["due_time"], last_error=row["last_error"],
    )


def _run(row: Any) -> MemoryRunRecord:
    return MemoryRunRecord(
        id=row["id"], agent_id=row["agent_id"], kind=row["kind"],
        conversation_id=row["conversation_id"], status=row["status"], reason=row["reason"],
        started=row["started"], finished=row["finished"], error=row["error"],
    )


class MemoryPendingRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def upsert(
        self, conversation_id: str, agent_id: int, upto_message_id: int, trigger_source: str,
        due_time: str | None = None,
    ) -> None:
        """One row per conversation; a newer event only moves upto_message_id forward."""
        now = self._db.now()
        await self._db.execute(
            f"INSERT INTO mate_memory_pending({_PENDING_COLUMNS}, create_time) "
            "VALUES (?, ?, ?, ?, 0, ?, NULL, ?) ON CONFLICT(conversation_id) DO UPDATE SET "
            "upto_message_id = CASE WHEN mate_memory_pending.upto_message_id > excluded.upto_message_id "
            "THEN mate_memory_pending.upto_message_id ELSE excluded.upto_message_id END, "
            "trigger_source = excluded.trigger_source",
            (conversation_id, agent_id, upto_message_id, trigger_source, due_time or now, now),
        )

    async def get(self, conversation_id: str) -> PendingMemoryRecord | None:
        row = await self._db.fetchone(
            f"SELECT {_PENDING_COLUMNS} FROM mate_memory_pending WHERE conversation_id = ?",
            (conversation_id,),
        )
        return _pending(row) if row else None

    async def all(self) -> list[PendingMemoryRecord]:
        rows = await self._db.fetchall(
            f"SELECT {_PENDING_COLUMNS} FROM mate_memory_pending ORDER BY due_time, create_time"
        )
        return [_pending(r) for r in rows]

    async def record_failure(self, conversation_id: str, error: str, due_time: str) -> int:
        await self._db.execute(
            "UPDATE mate_memory_pending SET attempts = attempts + 1, last_error = ?, due_time = ? "
            "WHERE conversation_id = ?",
            (error[:2000], due_time, conversation_id),
        )
        row = await self.get(conversation_id)
        return row.attempts if row else 0

    async def complete(self, conversation_id: str, upto_message_id: int) -> None:
        """Drop the row unless a newer message arrived meanwhile."""
        await self._db.execute(
            "DELETE FROM mate_memory_pending WHERE conversation_id = ? AND upto_message_id <= ?",
            (conversation_id, upto_message_id),
        )

    async def unrecorded(self) -> list[UnanalysedConversation]:
        """Conversations with messages past their memory watermark and no pending row."""
        rows = await self._db.fetchall(
            "SELECT c.id, c.agent_id, c.trigger_source, c.message_count, "
            "(SELECT MAX(m.id) FROM mate_message m WHERE m.conversation_id = c.id) AS last_id, "
            "(SELECT u.content FROM mate_message u WHERE u.conversation_id = c.id AND u.role = 'user' "
            " ORDER BY u.id DESC LIMIT 1) AS last_user, "
            "(SELECT COALESCE(NULLIF(u.sender_name, ''), u.sender_id) FROM mate_message u "
            " WHERE u.conversation_id = c.id AND u.role = 'user' ORDER BY u.id DESC LIMIT 1) AS speaker "
            "FROM mate_conversation c "
            "WHERE NOT EXISTS (SELECT 1 FROM mate_memory_pending p WHERE p.conversation_id = c.id) "
            "AND EXISTS (SELECT 1 FROM mate_message m WHERE m.conversation_id = c.id "
            "            AND m.id > c.memory_upto_message_id AND m.role = 'user')"
        )
        found: list[UnanalysedConversation] = []
        for row in rows:
            text, speaker = row["last_user"] or "", row["speaker"]
            prefix = f"[{speaker}] " if speaker else ""
            if prefix and text.startswith(prefix):  # a group message: what the user wrote counts
                text = text[len(prefix):]
            found.append(UnanalysedConversation(
                conversation_id=row["id"], agent_id=row["agent_id"], trigger_source=row["trigger_source"],
                message_count=row["message_count"], last_message_id=row["last_id"], last_user_text=text))
        return found

    async def delete(self, conversation_id: str) -> None:
        await self._db.execute(
            "DELETE FROM mate_memory_pending WHERE conversation_id = ?", (conversation_id,)
        )


class MemoryRunRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def start(self, agent_id: int, kind: str, conversation_id: str | None = None) -> int:
        rows = await self._db.write_returning(
            "INSERT INTO mate_memory_run(agent_id, kind, conversation_id, status, started) "
            "VALUES (?, ?, ?, 'running', ?) RETURNING id",
            (agent_id, kind, conversation_id, self._db.now()),
        )
        return int(rows[0][0])

    async def finish(self, run_id: int, status: str, reason: str | None = None, error: str | None = None) -> None:
        await self._db.execute(
            "UPDATE mate_memory_run SET status = ?, reason = ?, error = ?, finished = ? WHERE id = ?",
            (status, reason, error[:2000] if error else None, self._db.now(), run_id),
        )

    async def record(
        self, agent_id: int, kind: str, status: str, *, conversation_id: str | None = None,
        reason: str | None = None, error: str | None = None,
    ) -> int:
        now = self._db.now()
        rows = await self._db.write_returning(
            "INSERT INTO mate_memory_run(agent_id, kind, conversation_id, status, reason, started, "
            "finished, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (agent_id, kind, conversation_id, status, reason, now, now, error),
        )
        return int(rows[0][0])

    async def fail_interrupted(self, error: str, holder: str = "") -> int:
        """Close runs left 'running' by a process that died mid-run; call before any run starts.
        A run whose agent's memory lease another daemon (not `holder`, this one) holds is that
        daemon's, still going."""
        now = self._db.now()
        result = await self._db.execute(
            "UPDATE mate_memory_run SET status = 'failed', error = ?, finished = ? WHERE status = 'running' "
            "AND NOT EXISTS (SELECT 1 FROM mate_lease l WHERE l.name = ? || CAST(mate_memory_run.agent_id AS TEXT) "
            "AND l.expires_time > ? AND l.holder <> ?)",
            (error, now, MEMORY_LEASE_PREFIX, now, holder),
        )
        return result.rowcount

    async def recent(self, agent_id: int, limit: int = 5) -> list[MemoryRunRecord]:
        rows = await self._db.fetchall(
            f"SELECT {_RUN_COLUMNS} FROM mate_memory_run WHERE agent_id = ? ORDER BY id DESC LIMIT ?",
            (agent_id, limit),
        )
        return [_run(r) for r in rows]

    async def for_conversation(self, conversation_id: str) -> list[MemoryRunRecord]:
        rows = await self._db.fetchall(
            f"SELECT {_RUN_COLUMNS} FROM mate_memory_run WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        )
        return [_run(r) for r in rows]

    async def get(self, run_id: int) -> MemoryRunRecord | None:
        row = await self._db.fetchone(f"SELECT {_RUN_COLUMNS} FROM mate_memory_run WHERE id = ?", (run_id,))
        return _run(row) if row else None

    async def user_messages(self, run_id: int, limit: int) -> list[str]:
        """The newest `limit` user messages a run's transcript held (oldest first): those of its
        conversation since the run before it started, up to its own start."""
        rows = await self._db.fetchall(
            "SELECT m.content FROM mate_memory_run r JOIN mate_message m ON m.conversation_id = r.conversation_id "
            "WHERE r.id = ? AND m.role = 'user' AND m.create_time <= r.started AND m.create_time > COALESCE("
            "(SELECT MAX(p.started) FROM mate_memory_run p WHERE p.conversation_id = r.conversation_id "
            f"AND p.id < r.id AND p.status = 'completed'), '') AND {NOT_INCOGNITO.format(m='m')} "
            "ORDER BY m.id DESC LIMIT ?", (run_id, limit))
        return [str(r[0]) for r in reversed(rows)]
