"""The web page's address with the token is printed on a terminal only; a journal gets where the token is."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import sys
import threading
from pathlib import Path

import yaml

from tests.support.daemon_process import READY_LINE, USUAL_UMASK, clean_env, daemon, free_port, wait_for


def write_config(folder: Path, port: int) -> Path:
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump({"mate": {
        "timezone": "UTC", "channels": {"console": {"enabled": False}}, "api": {"port": port},
    }}), encoding="utf-8")
    return path


async def test_without_a_terminal_the_token_is_never_printed_and_the_log_says_where_it_is(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    where = str((tmp_path / "data" / "api-token").resolve())
    log_path = tmp_path / "data" / "matebot.log"
    async with daemon(config, port) as running:  # stderr is a pipe, as under systemd or docker
        await wait_for(lambda: running.logged("matebot: ready"), 10, "the start-up line")
        await wait_for(lambda: f"web chat: the API token is in {where}" in log_path.read_text(encoding="utf-8"),
                       10, "the log line naming the token file")
        token = (tmp_path / "data" / "api-token").read_text(encoding="utf-8").strip()
        printed = "\n".join(running.lines)
    log_file = log_path.read_text(encoding="utf-8")
    assert token not in printed and token not in log_file
    [ready] = [line for line in printed.splitlines() if line.startswith("matebot: ready")]
    assert ready.endswith(f"web chat: http://127.0.0.1:{port}/ (the token is in {where})"), ready


async def test_on_a_terminal_the_address_carries_the_token(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    controller, terminal = pty.openpty()
    seen = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the process closed the terminal
                return
            if not chunk:
                return
            seen.extend(chunk)

    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(config), stdin=asyncio.subprocess.DEVNULL,
        stdout=terminal, stderr=terminal, cwd=tmp_path, env=clean_env(), umask=USUAL_UMASK)
    os.close(terminal)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        await wait_for(lambda: b"web chat" in seen or process.returncode is not None, 30, "the start-up line")
        token = (tmp_path / "data" / "api-token").read_text(encoding="utf-8").strip()
        assert f"web chat: http://127.0.0.1:{port}/#token={token}" in seen.decode(), seen.decode()
        assert READY_LINE in seen.decode()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 20)
        reader.join(10)
        os.close(controller)
    log_file = (tmp_path / "data" / "matebot.log").read_text(encoding="utf-8")
    assert token not in log_file
