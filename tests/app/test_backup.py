"""`matebot backup DIR`: a consistent copy while the database is open and being written."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from bot.__main__ import main
from bot.app.core import open_core
from tests.support.config import make_config


def test_backup_copies_the_database_and_new_media_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = make_config(tmp_path)
    media = tmp_path / "media"
    media.mkdir()
    (media / "abc.png").write_bytes(b"picture")

    async def write_and_back_up() -> int:
        async with open_core(config) as core:  # the daemon's database stays open meanwhile
            await core.agents.ensure_configured()
            await core.repos.conversations.create("console:me", agent_id=1, channel="console",
                                                  chat_key="console:me", trigger_source="console")
            await core.repos.messages.add("console:me", "user", "remember the blue door", 5)
            return await asyncio.to_thread(main, ["backup", "--config", str(config_file), str(tmp_path / "bk")])

    config_file = tmp_path / "config.yaml"
    config_file.write_text(f"mate:\n  timezone: UTC\n  database:\n    path: {tmp_path / 'mate.db'}\n")
    assert asyncio.run(write_and_back_up()) == 0
    [copy] = list((tmp_path / "bk").glob("mate-*.db"))
    with sqlite3.connect(copy) as conn:
        assert conn.execute("SELECT content FROM mate_message").fetchall() == [("remember the blue door",)]
    assert (tmp_path / "bk" / "media" / "abc.png").read_bytes() == b"picture"
    assert "1 new media files" in capsys.readouterr().out


def test_backup_without_a_database_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(f"mate:\n  database:\n    path: {tmp_path / 'none.db'}\n")
    assert main(["backup", "--config", str(config_file), str(tmp_path / "bk")]) == 1
    assert "no database" in capsys.readouterr().err


def test_a_failed_copy_leaves_nothing_that_looks_like_a_backup(tmp_path: Path) -> None:
    from bot.storage.backup import copy_database

    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is not a database" * 100)
    target = tmp_path / "bk" / "mate-1.db"
    target.parent.mkdir()
    with pytest.raises(sqlite3.DatabaseError):
        copy_database(broken, target)
    assert list(target.parent.iterdir()) == []


def test_backup_copies_the_file_a_sqlite_url_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = tmp_path / "elsewhere" / "chats.db"
    elsewhere.parent.mkdir()
    with sqlite3.connect(elsewhere) as conn:
        conn.execute("CREATE TABLE mate_message (content TEXT)")
        conn.execute("INSERT INTO mate_message VALUES ('kept in the other file')")
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "abc.png").write_bytes(b"picture")  # media stay in database.path's folder
    config_file = tmp_path / "config.yaml"
    config_file.write_text(f"mate:\n  timezone: UTC\n  database:\n    path: {tmp_path / 'mate.db'}\n"
                           f"  storage:\n    url: sqlite:///{elsewhere}\n")
    assert main(["backup", "--config", str(config_file), str(tmp_path / "bk")]) == 0
    [copy] = list((tmp_path / "bk").glob("mate-*.db"))
    with sqlite3.connect(copy) as conn:
        assert conn.execute("SELECT content FROM mate_message").fetchall() == [("kept in the other file",)]
    assert (tmp_path / "bk" / "media" / "abc.png").read_bytes() == b"picture"
    assert not (tmp_path / "mate.db").exists()
