"""Version 15: a reminder keeps the group or server of its chat (mate_cron_job.target_place_id)."""

from __future__ import annotations

from bot.storage.migrations.v12 import CRON_JOB_COLUMNS, REMINDER_INDEXES

# From version 15 a reminder keeps its chat's place: the group (Telegram) or server (Discord)
# the access rules admit again at each run (a Discord channel's id does not tell its server).
# The table is copied as for version 12 rather than given an ADD COLUMN, which fails when a
# version is applied again over a database that has it (a restored schema_version): a copy
# over one that has it only loses the places, which then count as unknown.
CRON_JOB_COLUMNS_V12 = (CRON_JOB_COLUMNS + ", target_channel, target_chat_id, target_thread_id, run_at, "
                         "created_by, created_by_name, missed_time")

_PLACES = (
    """CREATE TABLE mate_cron_job_v15 (
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
        missed_time TEXT,
        target_place_id TEXT
    )""",
    f"INSERT INTO mate_cron_job_v15({CRON_JOB_COLUMNS_V12}) SELECT {CRON_JOB_COLUMNS_V12} FROM mate_cron_job",
    # The ids handed out so far stay handed out: a cancelled reminder's number never comes back.
    "DELETE FROM sqlite_sequence WHERE name = 'mate_cron_job_v15'",
    "UPDATE sqlite_sequence SET name = 'mate_cron_job_v15' WHERE name = 'mate_cron_job'",
    "DROP TABLE mate_cron_job",
    "ALTER TABLE mate_cron_job_v15 RENAME TO mate_cron_job",
    *REMINDER_INDEXES,  # they went with the old table
)

VERSION = 15
DESCRIPTION = "a reminder keeps the group or server of its chat (mate_cron_job.target_place_id)"
STATEMENTS: tuple[str, ...] = _PLACES
