"""SQL for scheduled tasks, the rows of mate_cron_job: the reminders people schedule in a chat
(task type `reminder`) and the system tasks of each agent (the nightly consolidation: `text` or
`emergence`). One timer runs both (bot/schedule/timer.py)."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from bot.storage.sql import SqlDatabase

REMINDER = "reminder"

_COLUMNS = (
    "id, agent_id, trigger_message, cron_expression, timezone, run_at, target_channel, target_chat_id, "
    "target_thread_id, created_by, created_by_name, enabled, next_run_time, last_run_time, missed_time, "
    "create_time, name, task_type, target_place_id"
)
# A chat is the channel, the chat and the thread (a forum topic is a chat of its own).
# A thread id or a run time may be NULL on either side: COALESCE to '' (never a real value) is the
# null-safe equality both SQLite and PostgreSQL read ("IS ?" is SQLite's alone).
_IN_CHAT = "target_channel = ? AND target_chat_id = ? AND COALESCE(target_thread_id, '') = COALESCE(?, '')"
_LIVE = "task_type = 'reminder' AND enabled = 1"
_SYSTEM = "task_type <> 'reminder'"
# What the timer may run: every kind, or reminders only (a daemon without memory runs no system task).
_RUNNABLE = {True: "enabled = 1", False: _LIVE}


@dataclass(frozen=True, slots=True)
class ChatRef:
    """Where a task delivers: the channel, the chat, and a thread or topic inside it."""

    channel: str
    chat_id: str
    thread_id: str | None = None

    def params(self) -> tuple[str, str, str | None]:
        return self.channel, self.chat_id, self.thread_id


@dataclass(frozen=True, slots=True)
class TaskRecord:
    id: int
    agent_id: int
    message: str
    cron: str  # "" for a one-shot task
    timezone: str
    run_at: str | None  # a one-shot task's time (UTC, stored form)
    chat: ChatRef
    created_by: str  # the sender's id on the channel
    created_by_name: str
    enabled: bool
    next_run_time: str | None
    last_run_time: str | None
    missed_time: str | None  # a run that was too late to make, not yet mentioned in the chat
    create_time: str
    name: str = REMINDER
    kind: str = REMINDER  # the row's task_type: reminder, or a system task's text / emergence
    # The group (Telegram) or server (Discord) its chat belongs to; None in a direct chat, for
    # a system task, or for a reminder made before version 15 kept it.
    place_id: str | None = None

    @property
    def is_reminder(self) -> bool:
        return self.kind == REMINDER


@dataclass(frozen=True, slots=True)
class NewTask:
    agent_id: int
    message: str
    cron: str
    timezone: str
    run_at: str | None
    next_run_time: str
    chat: ChatRef
    created_by: str
    created_by_name: str
    place_id: str | None = None  # the chat's group or server, where the message said


def _record(row: Any) -> TaskRecord:
    return TaskRecord(
        id=row["id"], agent_id=row["agent_id"], message=row["trigger_message"], cron=row["cron_expression"],
        timezone=row["timezone"], run_at=row["run_at"],
        chat=ChatRef(row["target_channel"] or "", row["target_chat_id"] or "", row["target_thread_id"]),
        created_by=row["created_by"] or "", created_by_name=row["created_by_name"] or "",
        enabled=bool(row["enabled"]), next_run_time=row["next_run_time"], last_run_time=row["last_run_time"],
        missed_time=row["missed_time"], create_time=row["create_time"], name=row["name"], kind=row["task_type"],
        place_id=row["target_place_id"],
    )


class TaskRepository:
    """Every scheduled task. The chat-facing reads and cancels see reminders only; the timer's
    reads (`due`, `claim`, ...) see system tasks too when asked to run them."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def add(self, task: NewTask, *, limit: int) -> int | None:
        """The new task's id, or None when its chat already has `limit` live tasks.

        The count and the insert are one statement in a transaction serialized per chat, so two
        requests at once (on two daemons too) cannot both take the last place."""
        now = self._db.now()
        chat = task.chat.params()
        async with self._db.transaction() as conn:
            await conn.serialize(f"tasks of {task.chat.channel}:{task.chat.chat_id}")
            added = await conn.fetchone(
                "INSERT INTO mate_cron_job(agent_id, name, cron_expression, timezone, task_type, trigger_message, "
                "enabled, next_run_time, run_at, target_channel, target_chat_id, target_thread_id, target_place_id, "
                "created_by, created_by_name, create_time, update_time) "
                "SELECT ?, ?, ?, ?, 'reminder', ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
                f"WHERE (SELECT COUNT(*) FROM mate_cron_job WHERE {_LIVE} AND {_IN_CHAT}) < ? RETURNING id",
                (task.agent_id, REMINDER, task.cron, task.timezone, task.message, task.next_run_time, task.run_at,
                 *chat, task.place_id, task.created_by, task.created_by_name, now, now, *chat, limit),
            )
        return int(added[0]) if added else None

    async def get(self, task_id: int) -> TaskRecord | None:
        row = await self._db.fetchone(
            f"SELECT {_COLUMNS} FROM mate_cron_job WHERE id = ? AND task_type = 'reminder'", (task_id,))
        return _record(row) if row else None

    async def in_chat(self, chat: ChatRef) -> builtins.list[TaskRecord]:
        """The chat's live tasks, the next due first."""
        rows = await self._db.fetchall(
            f"SELECT {_COLUMNS} FROM mate_cron_job WHERE {_LIVE} AND {_IN_CHAT} ORDER BY next_run_time, id",
            chat.params())
        return [_record(r) for r in rows]

    async def for_agent(self, agent_id: int | None) -> builtins.list[TaskRecord]:
        """Live tasks of one agent (None: of every agent), the next due first."""
        where, params = (f"{_LIVE} AND agent_id = ?", (agent_id,)) if agent_id is not None else (_LIVE, ())
        rows = await self._db.fetchall(
            f"SELECT {_COLUMNS} FROM mate_cron_job WHERE {where} ORDER BY next_run_time, id", params)
        return [_record(r) for r in rows]

    async def cancel(self, task_id: int, *, chat: ChatRef | None = None, agent_id: int | None = None) -> bool:
        """Remove a live task, only if it belongs to `chat` / `agent_id` where given."""
        sql = f"DELETE FROM mate_cron_job WHERE id = ? AND {_LIVE}"
        params: list[Any] = [task_id]
        if chat is not None:
            sql += f" AND {_IN_CHAT}"
            params += chat.params()
        if agent_id is not None:
            sql += " AND agent_id = ?"
            params.append(agent_id)
        return (await self._db.execute(sql, params)).rowcount > 0

    async def cancel_made_by(self, chat: ChatRef, created_by: str, agent_id: int) -> int:
        """Remove every live task one account made in `chat` for `agent_id`; how many were removed."""
        result = await self._db.execute(
            f"DELETE FROM mate_cron_job WHERE {_LIVE} AND {_IN_CHAT} AND COALESCE(created_by, '') = ? AND agent_id = ?",
            (*chat.params(), created_by, agent_id))
        return result.rowcount

    async def add_system(
        self, agent_id: int, name: str, cron: str, timezone: str, kind: str, message: str, *, enabled: bool = True,
    ) -> int:
        """A system task of `agent_id` (the timer computes its first run)."""
        now = self._db.now()
        rows = await self._db.write_returning(
            "INSERT INTO mate_cron_job(agent_id, name, cron_expression, timezone, task_type, "
            "trigger_message, enabled, create_time, update_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (agent_id, name, cron, timezone, kind, message, int(enabled), now, now),
        )
        return int(rows[0][0])

    async def system_tasks(self, agent_id: int | None = None) -> builtins.list[TaskRecord]:
        """System tasks of one agent (None: of every agent), enabled or not, by id."""
        where, params = (f"{_SYSTEM} AND agent_id = ?", (agent_id,)) if agent_id is not None else (_SYSTEM, ())
        rows = await self._db.fetchall(f"SELECT {_COLUMNS} FROM mate_cron_job WHERE {where} ORDER BY id", params)
        return [_record(r) for r in rows]

    async def unscheduled(self, *, system: bool) -> builtins.list[TaskRecord]:
        """Enabled tasks with no next run yet: new system tasks, or rows added by hand."""
        rows = await self._db.fetchall(
            f"SELECT {_COLUMNS} FROM mate_cron_job WHERE {_RUNNABLE[system]} AND next_run_time IS NULL ORDER BY id")
        return [_record(r) for r in rows]

    async def set_place(self, task_id: int, place_id: str) -> None:
        """The group or server of a task's chat, found after it was made (before places were kept)."""
        await self._db.execute("UPDATE mate_cron_job SET target_place_id = ? WHERE id = ? AND target_place_id IS NULL",
                               (place_id, task_id))

    async def set_next_run(self, task_id: int, next_run_time: str) -> bool:
        """A first next run, set only where none is (False: set meanwhile, or gone)."""
        result = await self._db.execute(
            "UPDATE mate_cron_job SET next_run_time = ? WHERE id = ? AND next_run_time IS NULL",
            (next_run_time, task_id))
        return result.rowcount > 0

    async def due(self, now: str, *, system: bool = False) -> builtins.list[TaskRecord]:
        rows = await self._db.fetchall(
            f"SELECT {_COLUMNS} FROM mate_cron_job WHERE {_RUNNABLE[system]} AND next_run_time <= ? "
            "ORDER BY next_run_time, id", (now,))
        return [_record(r) for r in rows]

    async def next_due(self, *, system: bool = False) -> str | None:
        row = await self._db.fetchone(f"SELECT MIN(next_run_time) FROM mate_cron_job WHERE {_RUNNABLE[system]}")
        return row[0] if row and row[0] else None

    async def claim(self, task_id: int, due: str, next_run_time: str | None, *, ran: str | None) -> bool:
        """Record the run due at `due` before it is delivered; False when another run took it or it
        was cancelled meanwhile. A one-shot task (no next run) is disabled by it."""
        result = await self._db.execute(
            "UPDATE mate_cron_job SET last_run_time = ?, next_run_time = ?, enabled = ?, update_time = ? "
            "WHERE id = ? AND enabled = 1 AND next_run_time = ?",
            (ran, next_run_time, int(next_run_time is not None), self._db.now(), task_id, due),
        )
        return result.rowcount > 0

    async def ran(self, task_id: int, started: str) -> None:
        """Record a system task's run once it ended."""
        await self._db.execute("UPDATE mate_cron_job SET last_run_time = ? WHERE id = ?", (started, task_id))

    async def release(self, task_id: int, due: str, claimed_next: str | None, last_run_time: str | None) -> None:
        """Undo a claim whose run never started or was cut by a stop: start-up makes it up."""
        await self._db.execute(
            "UPDATE mate_cron_job SET next_run_time = ?, last_run_time = ?, enabled = 1, update_time = ? "
            "WHERE id = ? AND COALESCE(next_run_time, '') = COALESCE(?, '')",
            (due, last_run_time, self._db.now(), task_id, claimed_next),
        )

    async def miss(self, task_id: int, due: str, next_run_time: str | None) -> bool:
        """Record a run that is too late to make: it is mentioned in its chat once, then forgotten."""
        result = await self._db.execute(
            "UPDATE mate_cron_job SET missed_time = ?, next_run_time = ?, enabled = ?, update_time = ? "
            "WHERE id = ? AND enabled = 1 AND next_run_time = ?",
            (due, next_run_time, int(next_run_time is not None), self._db.now(), task_id, due),
        )
        return result.rowcount > 0

    async def missed_in(self, chat: ChatRef) -> builtins.list[TaskRecord]:
        rows = await self._db.fetchall(
            f"SELECT {_COLUMNS} FROM mate_cron_job WHERE task_type = 'reminder' AND missed_time IS NOT NULL "
            f"AND {_IN_CHAT} ORDER BY missed_time, id", chat.params())
        return [_record(r) for r in rows]

    async def chats_with_missed(self) -> builtins.list[ChatRef]:
        rows = await self._db.fetchall(
            "SELECT DISTINCT target_channel, target_chat_id, target_thread_id FROM mate_cron_job "
            "WHERE task_type = 'reminder' AND missed_time IS NOT NULL")
        return [ChatRef(r[0] or "", r[1] or "", r[2]) for r in rows]

    async def forget_missed(self, task_id: int, missed_time: str) -> bool:
        """Clear a missed run once it was mentioned; False when another reply mentioned it first."""
        result = await self._db.execute(
            "UPDATE mate_cron_job SET missed_time = NULL WHERE id = ? AND missed_time = ?", (task_id, missed_time))
        return result.rowcount > 0
