"""A reminder keeps the group or server its chat belongs to (schema version 15): stored as made,
read back, and a database of version 14 migrates keeping every task and every id handed out."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from bot.app.core import Core
from bot.storage import Database, Repositories
from bot.storage.search_text import FUNCTION_NAME as SPACED_FUNCTION, spaced
from bot.storage.migrations import LATEST_VERSION, MIGRATIONS
from bot.storage.tasks import ChatRef, NewTask

SERVER_CHANNEL = ChatRef("discord", "200")


def reminder(message: str, *, place_id: str | None = None, chat: ChatRef = SERVER_CHANNEL) -> NewTask:
    return NewTask(agent_id=1, message=message, cron="", timezone="UTC", run_at="2030-01-01T09:00:00.000+00:00",
                   next_run_time="2030-01-01T09:00:00.000+00:00", chat=chat, created_by="70",
                   created_by_name="Olga", place_id=place_id)


async def test_a_reminder_keeps_its_place_and_a_direct_chats_has_none(core: Core) -> None:
    in_server = await core.repos.tasks.add(reminder("stand-up", place_id="100"), limit=25)
    direct = await core.repos.tasks.add(reminder("call mum", chat=ChatRef("discord", "300")), limit=25)
    assert in_server is not None and direct is not None
    stored = {task.id: task.place_id for task in await core.repos.tasks.for_agent(1)}
    assert stored == {in_server: "100", direct: None}
    found = await core.repos.tasks.get(in_server)
    assert found is not None and found.place_id == "100"


async def test_migration_15_keeps_every_task_and_never_hands_an_id_out_again(tmp_path: Path) -> None:
    db = tmp_path / "mate.db"
    with closing(sqlite3.connect(db)) as conn:  # a database as version 14 left it
        conn.create_function(SPACED_FUNCTION, 1, spaced, deterministic=True)
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
                     "applied_time TEXT NOT NULL)")
        for version, description, statements in MIGRATIONS:
            if version > 14:
                break
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, ?, '2026-01-01')", (version, description))
        conn.execute("INSERT INTO mate_agent(id, name, create_time, update_time) "
                     "VALUES (1, 'Mate', '2026-01-01', '2026-01-01')")
        for task_id in (1, 2, 3):
            conn.execute("INSERT INTO mate_cron_job(id, agent_id, name, cron_expression, timezone, task_type, "
                         "trigger_message, enabled, next_run_time, target_channel, target_chat_id, created_by, "
                         "create_time, update_time) VALUES (?, 1, 'reminder', '', 'UTC', 'reminder', 'stand-up', "
                         "1, '2030-01-01T09:00:00.000+00:00', 'discord', '200', '70', '2026-01-01', '2026-01-01')",
                         (task_id,))
        conn.execute("DELETE FROM mate_cron_job WHERE id = 3")  # cancelled: #3 is not to come back
        conn.commit()

    async with Database(db) as opened:
        repos = Repositories.over(opened)
        kept = await repos.tasks.for_agent(1)
        assert [(task.id, task.chat, task.place_id) for task in kept] == [
            (1, SERVER_CHANNEL, None), (2, SERVER_CHANNEL, None)]  # made before places were kept: unknown
        assert await repos.tasks.add(reminder("retro", place_id="100"), limit=25) == 4
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (LATEST_VERSION,)
        indexes = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'mate_cron_job'")}
        assert {"ix_cron_job_target", "ix_cron_job_due"} <= indexes
