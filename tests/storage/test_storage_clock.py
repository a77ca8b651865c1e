"""Storage dates what it writes by the runtime's clock, never the machine's (the suite passes
on any day of the week, and a simulated day stores its own dates); opening a database says in one
line what it did to the schema."""

from __future__ import annotations

import logging
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bot.app.core import open_core
from bot.app.runtime import open_runtime
from bot.storage.database import Database
from bot.storage.migrations import LATEST_VERSION
from memory.recall.search import MemorySearchService
from tests.support.config import make_config, pinned_clock

# 5 January 2031 is a Sunday.
A_SUNDAY = datetime(2031, 1, 5, 9, 30, tzinfo=timezone.utc)


async def test_rows_carry_the_time_of_the_clock_storage_was_given(tmp_path: Path) -> None:
    async with open_core(make_config(tmp_path), clock=pinned_clock(A_SUNDAY)) as core:
        await core.repos.conversations.create("console:me", agent_id=1, channel="console", chat_key="console:me",
                                              trigger_source="console")
        await core.repos.messages.add("console:me", "user", "We planted tomatoes in the garden.", 9)
        await core.workspace.write(1, "MEMORY.md", "- grows tomatoes\n")
        times = await core.db.fetchall(
            "SELECT create_time FROM mate_message UNION ALL SELECT update_time FROM mate_workspace_file "
            "WHERE filename = 'MEMORY.md' UNION ALL SELECT create_time FROM mate_conversation")
        assert times and all(str(t[0]).startswith("2031-01-05") for t in times), times
        # The search index dates rows by the same clock: "on Sunday" finds the row it wrote.
        found = await MemorySearchService(core.repos.search).search(1, "tomatoes on Sunday 5 January 2031")
        assert found["results"] and "tomatoes" in found["results"][0]["snippet"]


async def test_the_runtime_hands_its_clock_to_storage(tmp_path: Path) -> None:
    async with open_runtime(make_config(tmp_path), with_memory_worker=False, clock=pinned_clock(A_SUNDAY)) as rt:
        await rt.core.repos.conversations.create("console:me", agent_id=1, channel="console", chat_key="console:me",
                                                 trigger_source="console")
        rows = await rt.core.db.fetchall("SELECT create_time FROM mate_conversation")
        assert [str(r[0])[:10] for r in rows] == ["2031-01-05"]


async def test_creating_and_upgrading_a_database_logs_one_line_each(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "mate.db"
    with caplog.at_level(logging.INFO, logger="bot.storage.database"):
        async with Database(path):
            pass
    created = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert created == [f"database created (version {LATEST_VERSION}): {path}"]

    caplog.clear()
    with sqlite3.connect(path) as conn:  # as an older release left it, two versions behind
        conn.execute("DELETE FROM schema_version WHERE version > ?", (LATEST_VERSION - 2,))
    with caplog.at_level(logging.INFO, logger="bot.storage.database"):
        async with Database(path):
            pass
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == [
        f"database migrated from version {LATEST_VERSION - 2} to {LATEST_VERSION}"]

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bot.storage.database"):
        async with Database(path):
            pass
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []
