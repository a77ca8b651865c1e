"""SQL for mate_agent and the per-chat agent bindings."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import bot.storage.file_versions as file_versions
from bot.storage.sql import SqlDatabase
from bot.storage.file_versions import UNKNOWN_SOURCE, Made
from bot.core.records import AgentRecord


@dataclass(frozen=True, slots=True)
class AgentSeed:
    """What every new agent starts with."""

    name: str
    files: Sequence[tuple[str, str, int]]  # (filename, content, sort_order), created enabled
    job: tuple[str, str, str, str, str]  # (name, cron expression, time zone, task type, trigger message)


def read_chat_bindings(path: str | Path) -> dict[int, str]:
    """{agent id: chat key} of the per-chat agents, read without migrating or writing anything
    (for check-config); empty when there is no database yet."""
    file = Path(path)
    if not file.exists():
        return {}
    try:
        with contextlib.closing(sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT agent_id, chat_key FROM mate_chat_agent").fetchall()
    except sqlite3.Error:  # not a matebot database, or one from before the table existed
        return {}
    return {int(agent_id): str(key) for agent_id, key in rows}


class AgentRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def ensure(self, agent_id: int, name: str) -> bool:
        """Create agent `agent_id` unless it exists; True when it was created."""
        now = self._db.now()
        result = await self._db.execute(
            "INSERT INTO mate_agent(id, name, create_time, update_time) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
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

    async def bound_to_chats(self, agent_ids: Sequence[int]) -> dict[int, str]:
        """Which of `agent_ids` belong to a per-chat agent: {agent id: chat key}."""
        if not agent_ids:
            return {}
        rows = await self._db.fetchall(
            f"SELECT agent_id, chat_key FROM mate_chat_agent WHERE agent_id IN ({', '.join('?' for _ in agent_ids)})",
            list(agent_ids),
        )
        return {int(r["agent_id"]): str(r["chat_key"]) for r in rows}

    async def provision(self, seed: AgentSeed, *, agent_id: int | None = None, chat_key: str | None = None,
                        min_id: int = 0) -> tuple[int, bool]:
        """An agent with its seed files and cron job, all in one transaction; (id, created).

        With `agent_id` (a configured agent) the missing parts are added; with `chat_key`
        the chat's own agent is found, or created with the next free id above `min_id`.
        A crash part-way leaves no agent without its workspace.
        """
        now = self._db.now()
        async with self._db.transaction() as conn:
            await conn.serialize("mate_agent ids")  # the next free id, and a chat bound once
            if chat_key is not None:
                row = await conn.fetchone(
                    "SELECT agent_id FROM mate_chat_agent WHERE chat_key = ?", (chat_key,)
                )
                if row:
                    return int(row[0]), False
                top = await conn.fetchone("SELECT COALESCE(MAX(id), 0) FROM mate_agent")
                agent_id = max(int(top[0]) if top else 0, min_id) + 1
            assert agent_id is not None
            cursor = await conn.execute(
                "INSERT INTO mate_agent(id, name, create_time, update_time) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (agent_id, seed.name, now, now),
            )
            created = cursor.rowcount == 1
            if chat_key is not None:
                await conn.execute(
                    "INSERT INTO mate_chat_agent(chat_key, agent_id, create_time) VALUES (?, ?, ?)",
                    (chat_key, agent_id, now),
                )
            seeded = Made(UNKNOWN_SOURCE, None, keep=1, now=now)
            for filename, content, sort_order in seed.files:
                await file_versions.create(conn, agent_id, filename, content, seeded, enabled=True,
                                           sort_order=sort_order, if_absent=True, recorded=False)
            name, cron, zone, task_type, trigger = seed.job
            await conn.execute(
                "INSERT INTO mate_cron_job(agent_id, name, cron_expression, timezone, task_type, trigger_message, "
                "enabled, create_time, update_time) SELECT ?, ?, ?, ?, ?, ?, 1, ?, ? "
                "WHERE NOT EXISTS (SELECT 1 FROM mate_cron_job WHERE agent_id = ? AND task_type <> 'reminder')",
                (agent_id, name, cron, zone, task_type, trigger, now, now, agent_id),
            )
        return agent_id, created
