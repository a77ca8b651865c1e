"""Version 16: the timer finds every due task, reminders and system tasks alike, through one index."""

from __future__ import annotations

VERSION = 16
DESCRIPTION = "the timer's due tasks of every kind through one index (ix_cron_job_runnable)"
STATEMENTS: tuple[str, ...] = (
    # ix_cron_job_due covers reminders only; the timer reads system tasks beside them, and the
    # table keeps every one-shot reminder that ran (disabled) for months.
    "CREATE INDEX IF NOT EXISTS ix_cron_job_runnable ON mate_cron_job(next_run_time) WHERE enabled = 1",
)
