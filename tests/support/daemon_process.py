"""`matebot` as a real process for tests: start the daemon, read its stderr, run CLI commands."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.eventually import eventually
from tests.support.fakes.anthropic import FakeAnthropic

READY_LINE = "matebot ready"
POLL = 0.05
# How long a process may take to start or a command to finish before the test fails: a bound
# for a machine at load 15 (it is polled, so a quick start costs nothing of it).
PROCESS_TIMEOUT = 120.0
# The umask a login shell usually has: what matebot writes must be private in spite of it.
USUAL_UMASK = 0o022


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    await eventually(condition, what, timeout, poll=POLL)  # a process: no need to look more often


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without matebot's settings or secrets, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "MATE_", "TELEGRAM_", "DISCORD_"))}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", PTB_TIMEDELTA="true",
               PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def database_path(config_path: Path) -> Path:
    """mate.database.path of a config file, taken from the folder the process runs in (its own)."""
    data = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    path = Path(((data.get("mate") or {}).get("database") or {}).get("path", "data/mate.db"))
    return path if path.is_absolute() else config_path.parent / path


class Daemon:
    """`python -m bot run` in its own process, its stderr collected line by line."""

    def __init__(self, process: asyncio.subprocess.Process, port: int, token_file: Path) -> None:
        self.process = process
        self.base = f"http://127.0.0.1:{port}"
        self.token_file = token_file
        self.lines: list[str] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def logged(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    @property
    def auth(self) -> dict[str, str]:
        """The generated API token, from the file the daemon keeps it in."""
        return {"Authorization": "Bearer " + self.token_file.read_text(encoding="utf-8").strip()}

    @property
    def log(self) -> str:
        return "\n".join(self.lines[-40:])

    async def wait(self, timeout: float) -> int:
        code = await asyncio.wait_for(self.process.wait(), timeout)
        await asyncio.wait_for(self._reader, 5)
        return code

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.wait(PROCESS_TIMEOUT)


@asynccontextmanager
async def daemon(config_path: Path, port: int, *, env: Mapping[str, str] | None = None) -> AsyncIterator[Daemon]:
    """The daemon started in the config file's folder, ready (or the test fails with its log)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(config_path),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        cwd=config_path.parent, env=dict(env) if env is not None else clean_env(), umask=USUAL_UMASK,
    )
    running = Daemon(process, port, database_path(config_path).parent / "api-token")
    try:
        await wait_for(lambda: running.logged(READY_LINE) or process.returncode is not None, PROCESS_TIMEOUT, "ready")
        assert process.returncode is None, running.log
        yield running
    finally:
        await running.kill()


async def start_or_exit(config_path: Path, *, timeout: float = PROCESS_TIMEOUT) -> tuple[int | None, str]:
    """`matebot run` until it is ready (None and its log; then it is killed) or exits (its code and log)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(config_path),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        cwd=config_path.parent, env=clean_env(), umask=USUAL_UMASK,
    )
    running = Daemon(process, 0, database_path(config_path).parent / "api-token")
    try:
        await wait_for(lambda: running.logged(READY_LINE) or process.returncode is not None, timeout,
                       "the daemon to be ready or to exit")
        if process.returncode is None:
            return None, running.log
        return await running.wait(PROCESS_TIMEOUT), running.log
    finally:
        await running.kill()


@dataclass(frozen=True, slots=True)
class Finished:
    code: int
    out: str
    err: str


async def matebot(*args: str, cwd: Path, env: Mapping[str, str] | None = None,
                  timeout: float = PROCESS_TIMEOUT) -> Finished:
    """One `python -m bot ...` command run to its end."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd,
        env=dict(env) if env is not None else clean_env(), umask=USUAL_UMASK,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        raise AssertionError(f"matebot {' '.join(args)} still running after {timeout} s: {err.decode()}") from None
    assert process.returncode is not None
    return Finished(process.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def write_config(tmp_path: Path, fake: FakeAnthropic, port: int, **mate: Any) -> Path:
    """config.yaml in tmp_path for a daemon on the fake model, its API on `port`; `mate` overrides keys."""
    config = {"mate": {
        "timezone": "UTC",
        "database": {"path": str(tmp_path / "mate.db")},
        "llm": {"api-key": "test-key", "base-url": fake.url, "max-retries": 0, "timeout-seconds": 60},
        "memory": {"cooldown-minutes": 0, "idle-minutes": 0},  # extraction right after an exchange
        "channels": {"console": {"enabled": False}},
        "api": {"enabled": True, "host": "127.0.0.1", "port": port},
        **mate,
    }}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path
