"""The command line as a newcomer meets it (SPEC S33): Ctrl+C stops `matebot run` on a terminal and
a second one exits at once; commands that start no channel need no channel token; the offline
notice names a key set for the other protocol; `--version`; every argument has a help text; the
console says how to talk, get help and stop.

The terminal tests run the daemon on the slave side of a pty that is its controlling terminal, so
that Ctrl+C is what a terminal makes of it: a key while the prompt reads raw keys, a SIGINT from
the line discipline otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib.metadata
import io
import json
import os
import re
import signal
import struct
import sys
import termios
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from bot.core.config import LlmConfig, parse_config
from bot.app.daemon import offline_notice
from bot.core.prompts import PromptLibrary
from tests.support.daemon_process import PROCESS_TIMEOUT, clean_env, daemon, matebot, wait_for
from tests.support.fakes.anthropic import CustomReply, FakeAnthropic, RecordedRequest, Script
from tests.support.terminal import COLUMNS, PROMPT, ROWS, Terminal, wait_for

REPO = Path(__file__).resolve().parents[2]
# Run in the child before matebot: a session of its own whose controlling terminal is the pty.
_CONTROLLING_TERMINAL = ("import fcntl, os, sys, termios; os.setsid(); fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
                         "os.execv(sys.executable, [sys.executable, '-m', 'bot', *sys.argv[1:]])")


def _config(tmp_path: Path, **mate: Any) -> Path:
    data = {"mate": {"timezone": "UTC", "database": {"path": str(tmp_path / "data" / "mate.db")},
                     "log": {"file": str(tmp_path / "data" / "matebot.log")}, "api": {"enabled": False},
                     **mate}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in clean_env().items() if not k.startswith("OPENAI_")}
    env.update(extra)
    return env


def _prompt_waiting(terminal: Terminal) -> bool:
    shown = [line for line in terminal.lines if line]
    return bool(shown) and shown[-1] == PROMPT.rstrip()


@asynccontextmanager
async def matebot_on_a_terminal(tmp_path: Path, command: str, config: Path) -> AsyncIterator[Terminal]:
    """`matebot COMMAND` on a pty it controls, shown once its first prompt waits."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    os.set_blocking(master, False)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CONTROLLING_TERMINAL, command, "--config", str(config),
        stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path,
        env=_env(TERM="xterm", PYTHONPATH=str(REPO)))
    terminal = Terminal(master, process)
    try:
        await wait_for(lambda: _prompt_waiting(terminal) or process.returncode is not None,
                       "the first prompt", terminal, timeout=120)
        assert process.returncode is None, "\n".join(terminal.lines)
        yield terminal
        # Whichever way it stopped, the terminal is as it was: line editing, echo and Ctrl+C on.
        modes = termios.tcgetattr(slave)[3]
        assert modes & termios.ICANON and modes & termios.ECHO and modes & termios.ISIG
    finally:
        if process.returncode is None:
            process.kill()
        await asyncio.wait_for(process.wait(), 30)
        asyncio.get_running_loop().remove_reader(master)
        os.close(slave)
        os.close(master)


async def _exit_code(terminal: Terminal, timeout: float = 30) -> int:
    """The code it exits with; the bound is generous: the daemon itself aims at 5 s."""
    try:
        return await asyncio.wait_for(terminal.process.wait(), timeout)
    except TimeoutError:
        raise AssertionError(f"still running {timeout} s later; the screen:\n" + "\n".join(terminal.lines)) from None


@pytest.mark.parametrize("how", ["key", "signal"])
async def test_ctrl_c_stops_run_with_the_console_open(tmp_path: Path, how: str) -> None:
    config = _config(tmp_path, channels={"console": {"enabled": True}})  # offline: no model needed
    async with matebot_on_a_terminal(tmp_path, "run", config) as terminal:
        if how == "key":
            await terminal.type("\x03")  # the prompt reads raw keys: Ctrl+C arrives as a key
        else:
            os.killpg(terminal.process.pid, signal.SIGINT)  # as a terminal sends it to its foreground group
        assert await _exit_code(terminal) == 0


async def test_a_second_ctrl_c_during_a_slow_shutdown_exits_at_once(tmp_path: Path) -> None:
    release = asyncio.Event()

    async def hang(recorded: RecordedRequest) -> web.StreamResponse:
        await release.wait()  # the reply stays in flight: stopping waits for it (the drain)
        return web.json_response({})

    def respond(recorded: RecordedRequest) -> Script:
        return CustomReply(hang)

    async with FakeAnthropic() as fake:
        fake.responder = respond
        config = _config(tmp_path, channels={"console": {"enabled": True}}, **{"shutdown-drain-seconds": 600},
                         llm={"api-key": "test-key", "base-url": fake.url, "max-retries": 0})
        try:
            async with matebot_on_a_terminal(tmp_path, "run", config) as terminal:
                await terminal.type("hello there\n")
                await wait_for(lambda: any("hello there" in json.dumps(r.body) for r in fake.requests),
                               "the message to reach the model", terminal)
                await terminal.type("\x03")  # no prompt now: the terminal itself makes it a SIGINT
                await wait_for(lambda: "Ctrl+C again exits at once" in terminal.raw, "the first stop", terminal)
                assert terminal.process.returncode is None  # the reply in flight holds the shutdown
                await terminal.type("\x03")
                assert await _exit_code(terminal) == 130
                await wait_for(lambda: "second signal, exiting now" in terminal.raw, "the last line", terminal)
        finally:
            release.set()


@pytest.mark.parametrize(("command", "locale", "key"), [
    ("run", "en", "console_welcome_run"),
    ("chat", "zh-CN", "console_welcome_chat"),
])
async def test_the_console_says_how_to_talk_get_help_and_stop(
    tmp_path: Path, command: str, locale: str, key: str,
) -> None:
    config = _config(tmp_path, locale=locale, channels={"console": {"enabled": True}})
    welcome = PromptLibrary(locale).text(key)
    assert "/help" in welcome and "Ctrl+C" in welcome and "/quit" in welcome
    async with matebot_on_a_terminal(tmp_path, command, config) as terminal:
        assert welcome in terminal.raw.replace("\r\n", "\n")
        assert terminal.raw.index(welcome) < terminal.raw.rindex(PROMPT.strip())  # said before the first prompt
        await terminal.type("/quit\n" if command == "chat" else "\x03")
        assert await _exit_code(terminal) == 0


async def test_a_piped_console_gets_no_welcome(tmp_path: Path) -> None:
    """A script reads only the answers."""
    config = _config(tmp_path)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "chat", "--config", str(config), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=tmp_path,
        env=_env(PYTHONPATH=str(REPO)))
    out, err = await asyncio.wait_for(process.communicate(b"hi\n"), 120)
    assert process.returncode == 0, err.decode()
    assert "/help" not in out.decode() and "hi" in out.decode()


_NO_TOKENS = {"telegram": {"enabled": True, "token": "${TELEGRAM_BOT_TOKEN:-}", "allowed-users": ["42"]},
              "discord": {"enabled": True, "token": "${DISCORD_BOT_TOKEN:-}", "allowed-users": ["42"]},
              "console": {"enabled": False}}


async def test_commands_that_start_no_channel_run_without_channel_tokens(tmp_path: Path) -> None:
    config = _config(tmp_path, channels=_NO_TOKENS)
    backup = tmp_path / "backup"
    steps: list[tuple[str, ...]] = [
        ("people",), ("tasks",), ("conversations",), ("memory", "show", "--agent", "1"),
        ("memory", "search", "--agent", "1", "anything"), ("backup", str(backup)), ("restore", str(backup)),
    ]
    for step in steps:
        done = await matebot(*step, "--config", str(config), cwd=tmp_path, env=_env(), timeout=120)
        assert done.code == 0, f"{step}: {done.err}"
        assert "token" not in done.err, f"{step}: {done.err}"
    checked = await matebot("check-config", "--config", str(config), cwd=tmp_path, env=_env(), timeout=120)
    assert checked.code == 0, checked.err
    assert ("# warning: mate.channels.telegram.token: required when enabled (set TELEGRAM_BOT_TOKEN); "
            "`matebot run` stops at this until it is set") in checked.out.splitlines()


async def test_run_without_a_channel_token_stops_with_one_line_naming_the_key(tmp_path: Path) -> None:
    config = _config(tmp_path, channels=_NO_TOKENS)
    done = await matebot("run", "--config", str(config), cwd=tmp_path, env=_env(), timeout=120)
    assert done.code == 2
    assert done.err.strip().splitlines() == [
        "matebot: config error: mate.channels.telegram.token: required when enabled (set TELEGRAM_BOT_TOKEN)"]


@pytest.mark.parametrize(("api", "found", "wanted", "locale"), [
    ("anthropic", "OPENAI_API_KEY", "openai", "en"),
    ("openai", "ANTHROPIC_API_KEY", "anthropic", "en"),
    ("anthropic", "OPENAI_API_KEY", "openai", "zh-CN"),
])
def test_the_offline_notice_names_the_key_found_and_the_api_to_set(
    api: str, found: str, wanted: str, locale: str,
) -> None:
    environ = {found: "sk-test"}
    llm = parse_config({"mate": {"llm": {"api": api}}}, environ=environ).mate.llm
    assert not llm.uses_anthropic  # offline: the key is the other protocol's
    notice = offline_notice(PromptLibrary(locale), llm, environ)
    assert found in notice and f"mate.llm.api: {wanted}" in notice and "auto" in notice
    assert re.search(rf"mate\.llm\.api (is|是) {api}", notice)


def test_the_offline_notice_without_any_key_is_unchanged() -> None:
    notice = offline_notice(PromptLibrary("en"), LlmConfig(api="anthropic"), {})
    assert notice.startswith("No API key is set (ANTHROPIC_API_KEY)")


async def test_run_with_openai_key_and_anthropic_api_says_which_setting_to_change(tmp_path: Path) -> None:
    config = _config(tmp_path, channels={"console": {"enabled": False}})  # api: anthropic, as shipped
    async with daemon(config, 0, env=_env(OPENAI_API_KEY="sk-test-not-used")) as running:
        assert running.logged("OPENAI_API_KEY is set, but mate.llm.api is anthropic"), running.log
        assert running.logged("Set mate.llm.api: openai (or auto)"), running.log
        # The start-up summary is printed just after the ready line the harness waited for.
        await wait_for(lambda: running.logged("provider offline (OPENAI_API_KEY is not read with mate.llm.api anthropic"),
                       PROCESS_TIMEOUT, "the start-up summary")
        assert not running.logged("sk-test-not-used")


async def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    done = await matebot("--version", cwd=tmp_path, env=_env(), timeout=120)
    assert done.code == 0, done.err
    assert done.out == f"matebot {importlib.metadata.version('matebot')}\n"


_SECTION = re.compile(r"^\S.*:$")
_ENTRY = re.compile(r"^( {2,})(\S+(?: \S+)*)(?: {2,}(\S.*))?$")


def _help(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    from bot.__main__ import main

    with pytest.raises(SystemExit) as caught:
        main([*args, "--help"])
    assert caught.value.code == 0
    return capsys.readouterr().out


def _undescribed(text: str) -> tuple[str, list[str], list[str]]:
    """(the description, the entries listed without a help text, the subcommands listed) of one --help."""
    lines = text.splitlines()
    first_section = next(i for i, line in enumerate(lines) if _SECTION.match(line))
    usage_end = lines.index("")
    description = " ".join(line.strip() for line in lines[usage_end:first_section]).strip()
    missing: list[str] = []
    subcommands: list[str] = []
    for at in range(first_section, len(lines)):
        entry = _ENTRY.match(lines[at])
        if not entry or _SECTION.match(lines[at]):
            continue
        indent, invocation, help_text = len(entry.group(1)), entry.group(2), entry.group(3)
        if indent >= 8:
            continue  # a help text carried onto its own line, read with its entry
        if indent == 4:
            subcommands.append(invocation)
        following = lines[at + 1] if at + 1 < len(lines) else ""
        carried = len(following) - len(following.lstrip()) >= indent + 4 and following.strip()
        if not help_text and not carried:
            missing.append(invocation)
    return description, missing, subcommands


def test_every_command_and_argument_has_a_help_text(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps at the terminal's width
    seen: list[str] = []
    pending: list[list[str]] = [[]]
    while pending:
        command = pending.pop()
        description, missing, subcommands = _undescribed(_help(command, capsys))
        name = " ".join(["matebot", *command])
        seen.append(name)
        assert description, f"{name} --help has no description"
        assert not missing, f"{name} --help lists without a description: {missing}"
        pending.extend([*command, sub] for sub in subcommands)
    assert {"matebot run", "matebot memory search", "matebot backup", "matebot tasks"} <= set(seen)
    assert len(seen) == 19  # matebot, its 10 commands, memory's 8 actions: each read above


class _SilentTerminal:
    """A LineInput where nobody types: each read waits until it is cancelled."""

    def __init__(self) -> None:
        self.reading = asyncio.Event()
        self.cancelled = False

    async def read(self, prompt: str) -> str | None:
        self.reading.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return None

    def owning_terminal(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


async def test_stopping_the_console_leaves_the_prompt_it_waits_at() -> None:
    """So the terminal is given back at the first Ctrl+C, and the second is a signal, not a key."""
    from channels.console import ConsoleChannel

    async def handle(message: Any, stream: Any) -> str:
        raise AssertionError("nothing was typed")

    lines = _SilentTerminal()
    output = io.StringIO()
    console = ConsoleChannel(handle, lines=lines, output=output, user="me", welcome="how to talk")
    running = asyncio.create_task(console.run())
    await asyncio.wait_for(lines.reading.wait(), 30)
    await console.stop()
    await asyncio.wait_for(running, 30)
    assert lines.cancelled and console.closed.is_set()
    assert output.getvalue().startswith("how to talk\n")


# The session leader of a pty that runs `matebot` in a process group of its own, in the background
# (`matebot run &`), and says how that process ended: stopped by a signal (our SIGSTOP aside) or exited.
_IN_THE_BACKGROUND = """
import fcntl, os, signal, subprocess, sys, termios
os.setsid()
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
child = subprocess.Popen([sys.executable, "-m", "bot", *sys.argv[1:]], process_group=0)
print(f"daemon pid {child.pid}", flush=True)
while True:
    _, status = os.waitpid(child.pid, os.WUNTRACED)
    if os.WIFSTOPPED(status):
        if os.WSTOPSIG(status) == signal.SIGSTOP:
            continue
        print(f"daemon stopped by {signal.Signals(os.WSTOPSIG(status)).name}", flush=True)
        os.kill(child.pid, signal.SIGKILL)
        os.waitpid(child.pid, 0)
        sys.exit(3)
    print(f"daemon exited {os.waitstatus_to_exitcode(status)}", flush=True)
    sys.exit(0)
"""


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    return stat[stat.rindex(")") + 2] in "Tt"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads a process's state from /proc")
async def test_a_second_signal_to_run_in_the_background_of_a_terminal_exits_it(tmp_path: Path) -> None:
    """`matebot run &` with the console off and stdin still the terminal: the second signal's exit
    does not touch the terminal's modes (from a background group that would stop it with SIGTTOU)."""
    config = _config(tmp_path, channels={"console": {"enabled": False}})
    log_file = tmp_path / "data" / "matebot.log"
    master, slave = os.openpty()
    os.set_blocking(master, False)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _IN_THE_BACKGROUND, "run", "--config", str(config),
        stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path, env=_env(TERM="xterm", PYTHONPATH=str(REPO)))
    terminal = Terminal(master, process)
    pid = 0
    try:
        await wait_for(lambda: re.search(r"daemon pid (\d+)", terminal.raw), "the daemon to start", terminal)
        pid = int(re.search(r"daemon pid (\d+)", terminal.raw).group(1))  # type: ignore[union-attr]
        await wait_for(lambda: log_file.exists() and "matebot ready" in log_file.read_text(encoding="utf-8")
                       or "daemon exited" in terminal.raw, "the daemon to be ready", terminal, timeout=120)
        assert "daemon exited" not in terminal.raw, terminal.raw
        # Two signals that arrive together: held while it is stopped (two of one kind would merge).
        os.kill(pid, signal.SIGSTOP)
        await wait_for(lambda: _stopped(pid), "the daemon to be stopped", terminal)
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGINT)
        os.kill(pid, signal.SIGCONT)
        await wait_for(lambda: "daemon exited" in terminal.raw or "daemon stopped by" in terminal.raw,
                       "the daemon to end", terminal)
        assert "daemon exited 130" in terminal.raw, terminal.raw
        assert "second signal, exiting now" in terminal.raw
    finally:
        if process.returncode is None:
            process.kill()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(process.wait(), 30)
        asyncio.get_running_loop().remove_reader(master)
        os.close(slave)
        os.close(master)
