"""What matebot writes is its owner's alone: 0600 files in a 0700 data/, whatever the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import aiohttp
import yaml

from tests.support.daemon_process import daemon, free_port, matebot


def write_config(folder: Path, port: int) -> Path:
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump({"mate": {
        "timezone": "UTC", "channels": {"console": {"enabled": False}}, "api": {"port": port},
    }}), encoding="utf-8")
    return path


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


async def test_database_wal_log_token_and_backups_are_private(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    data = tmp_path / "data"
    async with daemon(config, port) as running:  # started with umask 022, as from a login shell
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{running.base}/api/v1/chat/1", headers=running.auth,
                                    json={"message": "hello"}) as response:
                assert response.status == 200
        assert (data / "mate.db-wal").exists()
        seen = {name: mode(data / name) for name in
                ("mate.db", "mate.db-wal", "mate.db-shm", "mate.db.lock", "matebot.log", "api-token")}
        seen["data/"] = mode(data)
        done = await matebot("backup", "bk", cwd=tmp_path)
        assert done.code == 0, done.err
    [copy] = (tmp_path / "bk").glob("mate-*.db")
    seen.update({"bk/": mode(tmp_path / "bk"), "backup": mode(copy)})
    assert seen == {"mate.db": "0o600", "mate.db-wal": "0o600", "mate.db-shm": "0o600", "mate.db.lock": "0o600",
                    "matebot.log": "0o600", "api-token": "0o600", "data/": "0o700", "bk/": "0o700",
                    "backup": "0o600"}


async def test_files_an_older_version_left_readable_are_tightened_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    config = write_config(tmp_path, port)
    async with daemon(config, port):
        pass
    loose = [data, data / "mate.db", data / "matebot.log"]
    for path in loose:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    async with daemon(config, port):
        assert [mode(path) for path in loose] == ["0o700", "0o600", "0o600"]


async def test_a_folder_the_user_chose_for_backups_keeps_its_mode(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    shared = tmp_path / "shared-backups"
    shared.mkdir()
    os.chmod(shared, 0o755)
    async with daemon(config, port):
        done = await matebot("backup", str(shared), cwd=tmp_path)
    assert done.code == 0, done.err
    [copy] = shared.glob("mate-*.db")
    assert (mode(shared), mode(copy)) == ("0o755", "0o600")
