"""`matebot restore BACKUP`: a backup put back after a crash, safely, with real processes and files."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import signal
import sqlite3
from contextlib import closing
from pathlib import Path

import aiohttp
import pytest
import yaml

from bot.__main__ import main
from bot.app.core import open_core
from tests.support.config import make_config
from tests.support.daemon_process import PROCESS_TIMEOUT, Daemon, daemon, free_port, matebot, start_or_exit


def write_config(folder: Path, port: int) -> Path:
    """Offline (no key), the default data/ layout inside `folder`, the API on `port`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump({"mate": {
        "timezone": "UTC",
        "channels": {"console": {"enabled": False}},
        "api": {"port": port},
    }}), encoding="utf-8")
    return path


async def say(d: Daemon, text: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{d.base}/api/v1/chat/1", headers=d.auth,
                                json={"conversationId": "c1", "message": text}) as response:
            assert response.status == 200, await response.text()


def said(db: Path) -> list[str]:
    with closing(sqlite3.connect(db, timeout=5)) as conn:
        return [row[0] for row in conn.execute(
            "SELECT content FROM mate_message WHERE role = 'user' ORDER BY id")]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_of(folder: Path) -> dict[str, str]:
    """Each file's content digest; the lock file (empty of meaning: the OS holds the lock) left out."""
    return {p.name: digest(p) for p in folder.iterdir() if p.is_file() and p.suffix != ".lock"}


async def crashed_with_a_backup(folder: Path) -> Path:
    """A database used before, then a daemon killed (-9) after a backup between two messages.

    Leaves data/mate.db with a `-wal` full of writes the backup does not have; returns the
    backup folder."""
    await _database_with_a_message(folder, "the first run")  # closed cleanly: all in mate.db
    port = free_port()
    config = write_config(folder, port)
    async with daemon(config, port) as running:
        await say(running, "the blue door")
        done = await matebot("backup", "bk", cwd=folder)
        assert done.code == 0, done.err
        await say(running, "the red door")
        running.process.send_signal(signal.SIGKILL)
        assert await running.wait(PROCESS_TIMEOUT) == -signal.SIGKILL
    wal = folder / "data" / "mate.db-wal"
    assert wal.exists() and wal.stat().st_size > 0  # what a crash leaves behind
    return folder / "bk"


async def test_restore_after_a_crash_gives_the_backed_up_data(tmp_path: Path) -> None:
    backups = await crashed_with_a_backup(tmp_path / "live")

    # What the old instructions said: stop matebot and copy the backup over data/mate.db.
    by_hand = tmp_path / "by-hand"
    shutil.copytree(tmp_path / "live", by_hand)
    by_hand_config = write_config(by_hand, free_port())
    [copy] = backups.glob("mate-*.db")
    shutil.copyfile(copy, by_hand / "data" / "mate.db")
    live = tmp_path / "live"
    (code, log), done = await asyncio.gather(start_or_exit(by_hand_config), matebot("restore", "bk", cwd=live))
    # The crashed run's -wal is read as belonging to the copy: a damaged database. The
    # daemon says so in one line and exits (it used to hang there until killed).
    assert code == 1, log
    assert "malformed" in log.splitlines()[-1] and "Traceback" not in log, log

    assert done.code == 0, done.err
    [line] = done.out.splitlines()
    assert line.startswith("restored data/mate.db from bk/mate-") and "integrity ok" in line, line
    data = live / "data"
    assert (data / "mate.db.before-restore").exists() and (data / "mate.db.before-restore-wal").exists()
    assert not (data / "mate.db-wal").exists()
    port = free_port()
    write_config(live, port)
    async with daemon(live / "config.yaml", port) as restored:
        assert said(data / "mate.db") == ["the first run", "the blue door"]  # the backup, not the crash
        await say(restored, "after the restore")
        assert "Traceback" not in restored.log, restored.log
    assert said(data / "mate.db")[-1] == "after the restore"
    # Nothing was lost: the crashed database is set aside with its -wal, which holds what the
    # backup lacked; restoring that file (its -wal copied along) undoes the restore.
    assert (data / "mate.db.before-restore-wal").stat().st_size > 0
    undo = await matebot("restore", "data/mate.db.before-restore", cwd=live)
    assert undo.code == 0, undo.err
    assert said(data / "mate.db") == ["the first run", "the blue door", "the red door"]
    assert not (data / "mate.db-wal").exists()


async def test_restore_is_refused_while_the_daemon_runs(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    async with daemon(config, port) as running:
        await say(running, "the blue door")
        assert (await matebot("backup", "bk", cwd=tmp_path)).code == 0
        before = sorted(p.name for p in (tmp_path / "data").iterdir())
        done = await matebot("restore", "bk", cwd=tmp_path)
        await say(running, "still here")  # the daemon never noticed
    assert done.code == 1
    [line] = done.err.splitlines()
    assert line.startswith("matebot: nothing restored: another matebot is already running"), line
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == before
    assert said(tmp_path / "data" / "mate.db") == ["the blue door", "still here"]


async def _database_with_a_message(folder: Path, text: str = "the blue door") -> Path:
    """folder/data/mate.db, used once and closed; folder/config.yaml names it."""
    db = folder / "data" / "mate.db"
    async with open_core(make_config(db.parent)) as core:
        await core.repos.conversations.create("console:me", agent_id=1, channel="console",
                                              chat_key="console:me", trigger_source="console")
        await core.repos.messages.add("console:me", "user", text, 5)
    return db


def config_naming(db: Path) -> Path:
    """A config file beside db's folder that names db by its absolute path (for in-process calls)."""
    path = db.parent.parent / "config.yaml"
    path.write_text(f"mate:\n  timezone: UTC\n  database:\n    path: {db}\n", encoding="utf-8")
    return path


def _damaged(good: Path, target: Path) -> Path:
    """A copy of `good` with a b-tree page overwritten: it opens, but is not whole."""
    raw = bytearray(good.read_bytes())
    page_size = int.from_bytes(raw[16:18], "big")
    middle = (len(raw) // page_size // 2) * page_size
    raw[middle:middle + page_size] = b"\x0d" + b"\xff" * (page_size - 1)
    target.write_bytes(bytes(raw))
    return target


@pytest.mark.parametrize("kind", ["garbage", "damaged page", "not matebot's"])
async def test_a_bad_backup_is_refused_and_nothing_is_touched(tmp_path: Path, kind: str) -> None:
    db = await _database_with_a_message(tmp_path)
    backups = tmp_path / "bk"
    assert await asyncio.to_thread(main, ["backup", "--config", str(config_naming(db)), str(backups)]) == 0
    [good] = backups.glob("mate-*.db")
    bad = backups / "mate-29990101-000000.db"  # the newest: the one the folder stands for
    if kind == "garbage":
        bad.write_bytes(b"this is not a database" * 1000)
    elif kind == "damaged page":
        _damaged(good, bad)
    else:
        with closing(sqlite3.connect(bad)) as conn:
            conn.execute("CREATE TABLE notes (body TEXT)")
            conn.commit()
    before = files_of(db.parent)
    done = await matebot("restore", "bk", cwd=tmp_path)
    assert done.code == 1, done.out
    [line] = done.err.splitlines()
    assert line.startswith("matebot: nothing restored: ") and "Traceback" not in done.err, line
    assert files_of(db.parent) == before  # no file changed or added
    assert said(db) == ["the blue door"]


def test_each_restore_keeps_the_files_it_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = asyncio.run(_database_with_a_message(tmp_path))
    config = ["--config", str(config_naming(db))]
    assert main(["backup", *config, str(tmp_path / "bk")]) == 0
    [copy] = (tmp_path / "bk").glob("mate-*.db")
    first_db = digest(db)
    assert main(["restore", *config, str(copy)]) == 0  # the file itself, not only its folder
    assert main(["restore", *config, str(tmp_path / "bk")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].endswith(f"the previous files are kept as {db}.before-restore.2"), lines
    assert digest(db.with_name("mate.db.before-restore")) == first_db  # the first set was not overwritten
    assert db.with_name("mate.db.before-restore.2").exists()
    assert said(db) == ["the blue door"]


def test_restore_adds_the_backups_media_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = asyncio.run(_database_with_a_message(tmp_path))
    media = db.parent / "media"
    media.mkdir()
    (media / "a.png").write_bytes(b"kept before the backup")
    config = ["--config", str(config_naming(db))]
    assert main(["backup", *config, str(tmp_path / "bk")]) == 0
    shutil.rmtree(media)  # lost with the disk
    assert main(["restore", *config, str(tmp_path / "bk")]) == 0
    assert "1 media files added" in capsys.readouterr().out
    assert (media / "a.png").read_bytes() == b"kept before the backup"


def test_restore_of_a_missing_backup_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.yaml").write_text(f"mate:\n  database:\n    path: {tmp_path / 'mate.db'}\n")
    (tmp_path / "empty").mkdir()
    for given in ("nowhere.db", "empty"):
        assert main(["restore", "--config", str(tmp_path / "config.yaml"), str(tmp_path / given)]) == 1
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith("matebot: nothing restored: no backup"), line
    assert not (tmp_path / "mate.db").exists()


def test_media_that_cannot_be_copied_is_reported_after_the_database_is_restored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = asyncio.run(_database_with_a_message(tmp_path))
    media = db.parent / "media"
    media.mkdir()
    (media / "a.png").write_bytes(b"a picture")
    config = ["--config", str(config_naming(db))]
    assert main(["backup", *config, str(tmp_path / "bk")]) == 0
    shutil.rmtree(media)
    media.write_bytes(b"a file where the media folder should be")  # copying into it must fail
    assert main(["restore", *config, str(tmp_path / "bk")]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1].startswith(f"restored {db} from ")
    [line] = captured.err.splitlines()
    assert line.startswith("matebot: the database is restored, but not every media file was copied: "), line
    assert "nothing restored" not in captured.err
    assert said(db) == ["the blue door"]


def test_a_restore_that_fails_after_setting_aside_puts_the_database_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import bot.app.cli.backup
    from bot.core.errors import StorageError

    db = asyncio.run(_database_with_a_message(tmp_path))
    config = ["--config", str(config_naming(db))]
    assert main(["backup", *config, str(tmp_path / "bk")]) == 0
    with closing(sqlite3.connect(db)) as conn:  # written after the backup: must survive the failed restore
        conn.execute("UPDATE mate_conversation SET title = 'written after the backup'")
        conn.commit()
    before = digest(db)

    def failing_disk(database: Path) -> int:  # the restored file reads back wrong: a failing disk
        raise StorageError(f"{database}: disk I/O error")

    monkeypatch.setattr(bot.app.cli.backup, "verify_restored", failing_disk)
    assert main(["restore", *config, str(tmp_path / "bk")]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert "the database is as it was before" in line, line
    assert digest(db) == before
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT title FROM mate_conversation").fetchone() == ("written after the backup",)
    assert not db.with_name("mate.db.before-restore").exists()
    assert db.with_name("mate.db.failed-restore").exists()
