"""`matebot chat` on a real pseudo terminal: long lines arrive whole, a pasted block is one
message, and log lines are printed above the prompt, never into what the user is typing;
where the terminal cannot be driven a cut line is said to be cut; piped long lines arrive whole.

The daemon runs as a real process on the slave side of a pty; the test is the terminal: it
types on the master side, answers the terminal queries, and reads the screen as pyte draws it.
"""

from __future__ import annotations

import asyncio
import io
import fcntl
import os
import struct
import sys
import termios
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from tests.support.fakes.anthropic import CustomReply, FakeAnthropic, RecordedRequest, Script, TextReply, untimed, is_memory_extraction
from tests.support.terminal import COLUMNS, ROWS, PROMPT, REPO, Terminal, wait_for



def _is_memory_request(recorded: RecordedRequest) -> bool:
    return is_memory_extraction(recorded.body)


def _user_texts(fake: FakeAnthropic) -> list[str]:
    """What the user said, one entry per chat request (the last user turn's text)."""
    texts = []
    for recorded in fake.requests:
        if recorded.path != "/v1/messages" or _is_memory_request(recorded):
            continue
        content = recorded.body["messages"][-1]["content"]
        blocks = [content] if isinstance(content, str) else [b["text"] for b in content if b.get("type") == "text"]
        texts.append(untimed(blocks[-1]))
    return texts


def _prompt_waiting(terminal: Terminal, typed: str = "") -> bool:
    """The prompt is the last line on the screen, holding exactly what was typed so far."""
    shown = [line for line in terminal.lines if line]
    return bool(shown) and shown[-1] == (PROMPT + typed).rstrip()


def _config_file(tmp_path: Path, fake: FakeAnthropic) -> Path:
    config = {"mate": {
        "timezone": "UTC",
        "database": {"path": str(tmp_path / "mate.db")},
        "llm": {"api-key": "test-key", "base-url": fake.url, "max-retries": 0},
        "memory": {"cooldown-minutes": 0},
        "api": {"enabled": False},
    }}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@asynccontextmanager
async def chat_on_a_terminal(tmp_path: Path, fake: FakeAnthropic, *,
                             output_on_terminal: bool = True) -> AsyncIterator[Terminal]:
    """`matebot chat` with its input (and, by default, its output) on a pty of ROWS x COLUMNS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MATE_"))}
    env.update(TERM="xterm", PYTHONPATH=str(REPO), NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    os.set_blocking(master, False)
    output: int = slave if output_on_terminal else asyncio.subprocess.PIPE
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "chat", "--config", str(_config_file(tmp_path, fake)),
        stdin=slave, stdout=output, stderr=output, cwd=tmp_path, env=env, start_new_session=True)
    terminal = Terminal(master, process)
    try:
        if output_on_terminal:
            await wait_for(lambda: _prompt_waiting(terminal), "the first prompt", terminal)
        yield terminal
        await asyncio.wait_for(process.wait(), 60)
        # The slave side is still open here, so its modes can be read: the program put the
        # terminal back as it found it (line editing and echo on), however it was stopped.
        modes = termios.tcgetattr(slave)[3]
        assert modes & termios.ICANON and modes & termios.ECHO and modes & termios.ISIG
    finally:
        if process.returncode is None:
            process.kill()
        await asyncio.wait_for(process.wait(), 30)
        asyncio.get_running_loop().remove_reader(master)
        os.close(slave)
        os.close(master)


async def _leave(terminal: Terminal, keys: str = "/quit\n") -> None:
    """Leave the chat with `keys` (/quit, Ctrl-C, Ctrl-D) or a SIGTERM (keys=""); it exits with 0."""
    if keys:
        await terminal.type(keys)
    else:
        terminal.process.terminate()
    await asyncio.wait_for(terminal.process.wait(), 60)
    assert terminal.process.returncode == 0, "\n".join(terminal.lines)


async def test_a_line_longer_than_the_terminal_line_limit_arrives_whole(tmp_path: Path) -> None:
    line = "".join(f"{i:05d} " for i in range(1000)).strip()  # 5 999 characters; the kernel's limit is 4 095
    async with FakeAnthropic(default_text="got it") as fake, chat_on_a_terminal(tmp_path, fake) as terminal:
        await terminal.paste(line)
        await terminal.type("\n")
        await wait_for(lambda: _user_texts(fake), "the message to reach the model", terminal)
        await wait_for(lambda: terminal.shows("got it") and _prompt_waiting(terminal), "the reply", terminal)
        await _leave(terminal, "\x03")  # Ctrl-C stops it, as it stops the daemon
    (received,) = _user_texts(fake)
    assert len(received) == len(line) and received == line


async def test_a_pasted_block_of_lines_is_one_message(tmp_path: Path) -> None:
    block = "first line of the paste\nsecond line\nthird and last line"
    async with FakeAnthropic(default_text="got it") as fake, chat_on_a_terminal(tmp_path, fake) as terminal:
        await terminal.paste(block)
        await terminal.type("\n")
        await wait_for(lambda: _user_texts(fake), "the message to reach the model", terminal)
        await wait_for(lambda: terminal.shows("got it") and _prompt_waiting(terminal), "the reply", terminal)
        await _leave(terminal)
    assert _user_texts(fake) == [block]


async def test_a_warning_logged_at_the_prompt_is_printed_above_it(tmp_path: Path) -> None:
    release = asyncio.Event()

    async def failing_extraction(recorded: RecordedRequest) -> web.StreamResponse:
        await release.wait()  # held until the user is half-way through typing
        return web.json_response({"type": "error", "error": {"type": "invalid_request_error",
                                                             "message": "extraction refused"}}, status=400)

    def respond(recorded: RecordedRequest) -> Script:
        if _is_memory_request(recorded):
            return CustomReply(failing_extraction)
        return TextReply("noted")

    async with FakeAnthropic() as fake, chat_on_a_terminal(tmp_path, fake) as terminal:
        fake.responder = respond
        await terminal.type("remember that I keep bees on my roof\n")
        await wait_for(lambda: terminal.shows("noted") and _prompt_waiting(terminal), "the first reply", terminal)
        await wait_for(lambda: any(_is_memory_request(r) for r in fake.requests), "the extraction", terminal)
        await terminal.type("hel")
        await wait_for(lambda: _prompt_waiting(terminal, "hel"), "the typed text", terminal)
        release.set()
        await wait_for(lambda: terminal.shows("extraction refused"), "the warning on the screen", terminal)
        (warning,) = [line for line in terminal.lines if " WARNING " in line]  # it may wrap onto a next line
        assert not warning.startswith(PROMPT.strip()), terminal.lines  # on its own line, not after "you> hel"
        await wait_for(lambda: _prompt_waiting(terminal, "hel"), "the prompt redrawn under the warning", terminal)
        await terminal.type("lo\n")
        await wait_for(lambda: len(_user_texts(fake)) == 2, "the second message", terminal)
        await wait_for(lambda: _prompt_waiting(terminal), "the prompt after the second reply", terminal)
        await _leave(terminal, "")  # SIGTERM while the prompt owns the terminal
    assert _user_texts(fake)[1] == "hello"


async def test_a_line_cut_by_the_terminal_is_reported_not_sent(tmp_path: Path) -> None:
    """With its output redirected the console cannot drive the terminal: the kernel cuts long lines."""
    line = "x" * 6000
    async with FakeAnthropic(default_text="got it") as fake, \
            chat_on_a_terminal(tmp_path, fake, output_on_terminal=False) as terminal:
        assert terminal.process.stdout is not None
        await terminal.type(line + "\n" + "short one\n" + "/quit\n")
        out, err = await asyncio.wait_for(terminal.process.communicate(), 60)
    printed = out.decode()
    assert terminal.process.returncode == 0, err.decode()
    assert "(That line reached the most this terminal passes on in one line (4095 bytes)" in printed
    assert _user_texts(fake) == ["short one"]  # the cut line never reached the model
    assert "x" * 100 not in printed + err.decode()


async def test_a_piped_line_of_100_kb_arrives_whole(tmp_path: Path) -> None:
    """A pipe has no terminal limit; the line reader must not have one of 64 KiB either."""
    long_line = " ".join(f"{i:06d}" for i in range(100_000 // 7))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MATE_"))}
    env.update(PYTHONPATH=str(REPO), NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    async with FakeAnthropic(default_text="got it") as fake:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "chat", "--config", str(_config_file(tmp_path, fake)),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=tmp_path, env=env)
        out, err = await asyncio.wait_for(process.communicate(f"{long_line}\nand after it\n".encode()), 60)
    assert process.returncode == 0, err.decode()
    assert _user_texts(fake) == [long_line, "and after it"]
    assert "Traceback" not in err.decode() and out.decode().count("got it") == 2


async def test_a_line_over_the_readers_limit_is_skipped_whole_and_said_so() -> None:
    from channels.console import ConsoleChannel

    limit = 8 * 1024 * 1024  # what the console reads stdin with
    received: list[str] = []

    async def handle(message: Any, stream: Any) -> str:
        received.append(message.text)
        return "got it"

    reader = asyncio.StreamReader(limit=limit)
    reader.feed_data(b"z" * (limit + 10) + b"\nnext\n" + b"w" * (limit + 1))
    reader.feed_eof()
    output = io.StringIO()
    await ConsoleChannel(handle, reader=reader, output=output, user="me").run()
    assert received == ["next"]  # neither over-long line nor any piece of it became a message
    assert output.getvalue().count(f"(That line was longer than {limit} bytes, so it was skipped") == 2
