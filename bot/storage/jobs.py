"""SQL for the system jobs of mate_cron_job (the nightly consolidation); reminders are in bot/storage/tasks.py."""

from __future__ import annotations

import builtins
from typing import Any

from bot.storage.database import Database
from bot.core.records import CronJobRecord

_COLUMNS = (
    "id, agent_id, name, cron_expression, timezone, task_type, trigger_message, enabled, "
    "last_run_time, next_run_time, update_time, create_time"
)
# Reminders people schedule live in the same table; the cron scheduler never sees them.
_JOBS = "task_type <> 'reminder'"


def _record(row: Any) -> CronJobRecord:
    return CronJobRecord(
        id=row["id"], agent_id=row["agent_id"], name=row["name"],
        cron_expression=row["cron_expression"], timezone=row["timezone"],
        task_type=row["task_type"], trigger_message=row["trigger_message"],
        enabled=bool(row["enabled"]), last_run_time=row["last_run_time"],
        next_run_time=row["next_run_time"], update_time=row["update_time"],
        create_time=row["create_time"],
    )


class SqliteCronJobRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(
        self, agent_id: int, name: str, cron_expression: str, timezone: str, task_type: str,
        trigger_message: str, enabled: bool = True,
    ) -> int:
        now = self._db.now()
        result = await self._db.execute(
            "INSERT INTO mate_cron_job(agent_id, name, cron_expression, timezone, task_type, "
            "trigger_message, enabled, create_time, update_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (agent_id, name, cron_expression, timezone, task_type, trigger_message, int(enabled), now, now),
        )
        return result.lastrowid

    async def list(self, *, enabled_only: bool = False) -> list[CronJobRecord]:
        sql = f"SELECT {_COLUMNS} FROM mate_cron_job WHERE {_JOBS}"
        if enabled_only:
            sql += " AND enabled = 1"
        return [_record(r) for r in await self._db.fetchall(sql + " ORDER BY id")]

    async def for_agent(self, agent_id: int) -> builtins.list[CronJobRecord]:
        rows = await self._db.fetchall(
            f"SELECT {_COLUMNS} FROM mate_cron_job WHERE agent_id = ? AND {_JOBS} ORDER BY id", (agent_id,)
        )
        return [_record(r) for r in rows]

    async def mark_run(self, job_id: int, last_run_time: str, next_run_time: str | None) -> None:
        await self._db.execute(
            "UPDATE mate_cron_job SET last_run_time = ?, next_run_time = ? WHERE id = ?",
            (last_run_time, next_run_time, job_id),
        )

    async def set_next_run(self, job_id: int, next_run_time: str | None) -> None:
        await self._db.execute(
            "UPDATE mate_cron_job SET next_run_time = ? WHERE id = ?", (next_run_time, job_id)
        )

    async def fingerprint(self) -> str:
        """Changes whenever a job is added, removed or edited (used to reload the scheduler)."""
        row = await self._db.fetchone(
            "SELECT COUNT(*), COALESCE(MAX(id), 0), COALESCE(MAX(update_time), '') FROM mate_cron_job "
            f"WHERE {_JOBS}"
        )
        return f"{row[0]}:{row[1]}:{row[2]}" if row else ""
