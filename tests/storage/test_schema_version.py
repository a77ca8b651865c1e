"""A database a newer matebot upgraded: this version refuses it in one line and leaves it as it was."""

from __future__ import annotations

import hashlib
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
import yaml

from bot.__main__ import main
from bot.app.core import open_core
from bot.storage.migrations import MIGRATIONS
from tests.support.config import make_config
from tests.support.daemon_process import free_port, matebot, start_or_exit

LATEST_VERSION = max(version for version, _, _ in MIGRATIONS)


async def newer_database(folder: Path) -> Path:
    """folder/data/mate.db as a later version would leave it: one migration past this code's last."""
    db = folder / "data" / "mate.db"
    async with open_core(make_config(db.parent)) as core:
        await core.repos.conversations.create("console:me", agent_id=1, channel="console",
                                              chat_key="console:me", trigger_source="console")
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("INSERT INTO schema_version(version, description, applied_time) "
                     "VALUES (?, 'from the future', '2030-01-01T00:00:00Z')", (LATEST_VERSION + 1,))
        conn.execute("CREATE TABLE mate_from_the_future (id INTEGER PRIMARY KEY)")
        conn.commit()
    return db


def fingerprint(db: Path) -> tuple[str, list[str]]:
    return hashlib.sha256(db.read_bytes()).hexdigest(), sorted(p.name for p in db.parent.iterdir())


async def test_the_daemon_refuses_a_newer_database_in_one_line(tmp_path: Path) -> None:
    db = await newer_database(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"mate": {"timezone": "UTC", "channels": {"console": {"enabled": False}},
                                               "api": {"port": free_port()}}}), encoding="utf-8")
    before = fingerprint(db)
    code, log = await start_or_exit(config)
    assert code == 1, log
    assert "Traceback" not in log, log
    assert log.splitlines()[-1] == (
        f"matebot: the database data/mate.db was upgraded by a newer matebot (schema version "
        f"{LATEST_VERSION + 1}; this version knows up to {LATEST_VERSION}); install that version again, "
        f"or restore a backup made by this one")
    after = fingerprint(db)
    assert after[0] == before[0]  # not a byte changed
    assert [name for name in after[1] if name not in before[1]] == ["mate.db.lock", "matebot.log"]  # no -wal


async def test_cli_commands_refuse_a_newer_database_too(tmp_path: Path) -> None:
    db = await newer_database(tmp_path)
    before = fingerprint(db)
    done = await matebot("memory", "show", "--agent", "1", cwd=tmp_path)
    assert done.code == 1 and "Traceback" not in done.err, done.err
    [line] = done.err.splitlines()
    assert "was upgraded by a newer matebot" in line
    assert fingerprint(db) == before


def test_a_backup_from_a_newer_version_is_not_restored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    newer = asyncio.run(newer_database(tmp_path / "newer"))
    current = tmp_path / "current" / "mate.db"
    config = tmp_path / "config.yaml"
    config.write_text(f"mate:\n  database:\n    path: {current}\n", encoding="utf-8")
    assert main(["restore", "--config", str(config), str(newer)]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("matebot: nothing restored: ") and "was upgraded by a newer matebot" in line, line
    assert not current.exists()
