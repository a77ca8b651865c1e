"""Version 12: mate_cron_job holds reminders: task type reminder, the chat to deliver to, a one-shot time, who made it and a missed run to mention."""

from __future__ import annotations

# From version 12 mate_cron_job also holds the reminders people schedule in a chat (task type
# `reminder`). SQLite cannot widen a CHECK constraint in place, so the table is copied into
# one with the new columns; nothing references it, so the copy keeps every id and row.
CRON_JOB_COLUMNS = ("id, agent_id, name, cron_expression, timezone, task_type, trigger_message, enabled, "
                     "last_run_time, next_run_time, create_time, update_time")

REMINDER_INDEXES = (
    """CREATE INDEX IF NOT EXISTS ix_cron_job_target ON mate_cron_job(target_channel, target_chat_id)
        WHERE task_type = 'reminder'""",
    """CREATE INDEX IF NOT EXISTS ix_cron_job_due ON mate_cron_job(next_run_time)
        WHERE task_type = 'reminder' AND enabled = 1""",
)

_REMINDERS = (
    """CREATE TABLE mate_cron_job_v12 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
        name TEXT NOT NULL,
        cron_expression TEXT NOT NULL,
        timezone TEXT NOT NULL,
        task_type TEXT NOT NULL CHECK (task_type IN ('text', 'emergence', 'reminder')),
        trigger_message TEXT NOT NULL DEFAULT '',
        enabled INTEGER NOT NULL DEFAULT 1,
        last_run_time TEXT,
        next_run_time TEXT,
        create_time TEXT NOT NULL,
        update_time TEXT NOT NULL,
        target_channel TEXT,
        target_chat_id TEXT,
        target_thread_id TEXT,
        run_at TEXT,
        created_by TEXT,
        created_by_name TEXT,
        missed_time TEXT
    )""",
    f"INSERT INTO mate_cron_job_v12({CRON_JOB_COLUMNS}) SELECT {CRON_JOB_COLUMNS} FROM mate_cron_job",
    "DROP TABLE mate_cron_job",
    "ALTER TABLE mate_cron_job_v12 RENAME TO mate_cron_job",
    *REMINDER_INDEXES,
)

VERSION = 12
DESCRIPTION = (
    "mate_cron_job holds reminders: task type reminder, the chat to deliver to, a one-shot "
    "time, who made it and a missed run to mention"
)
STATEMENTS: tuple[str, ...] = _REMINDERS
