"""SQL for mate_agent and the per-chat agent bindings."""

from __future__ import annotations

from bot.storage.database import Database, utc_now
from bot.storage.records import AgentRecord


class SqliteAgentRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def ensure(self, agent_id: int, name: str) -> bool:
        """Create agent `agent_id` unless it exists; True when it was created."""
        now = utc_now()
        result = await self._db.execute(
            "INSERT OR IGNORE INTO mate_agent(id, name, create_time, update_time) VALUES (?, ?, ?, ?)",
            (agent_id, name, now, now),
        )
        return result.rowcount == 1

    async def get(self, agent_id: int) -> AgentRecord | None:
        row = await self._db.fetchone(
            "SELECT id, name, create_time FROM mate_agent WHERE id = ?", (agent_id,)
        )
        return AgentRecord(row["id"], row["name"], row["create_time"]) if row else None

    async def list(self) -> list[AgentRecord]:
        rows = await self._db.fetchall("SELECT id, name, create_time FROM mate_agent ORDER BY id")
        return [AgentRecord(r["id"], r["name"], r["create_time"]) for r in rows]

    async def agent_for_chat(self, chat_key: str) -> int | None:
        row = await self._db.fetchone(
            "SELECT agent_id FROM mate_chat_agent WHERE chat_key = ?", (chat_key,)
        )
        return int(row["agent_id"]) if row else None

    async def create_for_chat(self, chat_key: str, name: str, min_id: int) -> tuple[int, bool]:
        """The chat's own agent, created (id > min_id) on first contact; (id, created)."""
        now = utc_now()
        async with self._db.transaction() as conn:
            async with conn.execute(
                "SELECT agent_id FROM mate_chat_agent WHERE chat_key = ?", (chat_key,)
            ) as cur:
                row = await cur.fetchone()
            if row:
                return int(row[0]), False
            async with conn.execute("SELECT COALESCE(MAX(id), 0) FROM mate_agent") as cur:
                top = await cur.fetchone()
            agent_id = max(int(top[0]) if top else 0, min_id) + 1
            await conn.execute(
                "INSERT INTO mate_agent(id, name, create_time, update_time) VALUES (?, ?, ?, ?)",
                (agent_id, name, now, now),
            )
            await conn.execute(
                "INSERT INTO mate_chat_agent(chat_key, agent_id, create_time) VALUES (?, ?, ?)",
                (chat_key, agent_id, now),
            )
        return agent_id, True
