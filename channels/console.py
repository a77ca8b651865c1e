"""ConsoleChannel: a chat on stdin/stdout for the owner (trusted, S13), on a terminal or a pipe.

On a terminal (stdin and stdout both one) prompt_toolkit drives it: it reads keys itself,
so the kernel's 4 095-byte line limit does not apply, a bracketed paste of several lines
is one message, and log lines written meanwhile are printed above the prompt, which is
then redrawn with what was typed so far. Anything else (a pipe, a file, or a terminal
whose output is redirected) is read line by line, one message a line.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Protocol, TextIO

from bot.core.prompts import PromptLibrary
from channels.base import CHANNEL_OK, InboundMessage, OutboundMessage, ReplyStream, channel_stopped

log = logging.getLogger(__name__)

Handler = Callable[[InboundMessage, ReplyStream], Awaitable[str | None]]
QUIT = ("/quit", "/exit")
# A terminal in canonical mode passes on at most this many bytes of a line (Linux N_TTY):
# the rest of the line is dropped before we can read it.
TTY_LINE_LIMIT = 4095
# A piped line longer than this is skipped whole (the router refuses far shorter ones anyway).
MAX_LINE_BYTES = 8 * 1024 * 1024


class LineCut(Exception):
    """A line that did not arrive whole: the terminal dropped its end, or it was over our limit."""

    def __init__(self, limit: int, *, by_terminal: bool) -> None:
        super().__init__(f"a line reached {limit} bytes")
        self.limit = limit
        self.by_terminal = by_terminal


class LineInput(Protocol):
    """Where the console's messages come from."""

    async def read(self, prompt: str) -> str | None:
        """The next message without its line end; None at the end of input; LineCut for a cut line."""
        ...

    def owning_terminal(self) -> contextlib.AbstractContextManager[None]:
        """While entered, whatever else writes to stdout or stderr keeps off the prompt."""
        ...


class StreamLineInput:
    """One message per line from a stream (a pipe, a file, or a terminal in canonical mode)."""

    def __init__(self, reader: asyncio.StreamReader | None, output: TextIO, *, terminal: bool = False) -> None:
        self._reader = reader
        self._output = output
        self._terminal = terminal  # a terminal's kernel cuts long lines

    async def read(self, prompt: str) -> str | None:
        reader = self._reader = self._reader or await _open_stdin()
        self._output.write(prompt)
        self._output.flush()
        raw = await _read_line(reader)
        if raw is None:
            raise LineCut(MAX_LINE_BYTES, by_terminal=False)
        if not raw:
            return None
        line = raw.rstrip(b"\r\n")
        if self._terminal and len(line) >= TTY_LINE_LIMIT:
            raise LineCut(TTY_LINE_LIMIT, by_terminal=True)
        return line.decode("utf-8", errors="replace")

    def owning_terminal(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class TerminalLineInput:
    """prompt_toolkit reads the keys: long lines, bracketed paste, log lines above the prompt."""

    def __init__(self) -> None:
        from prompt_toolkit import PromptSession

        self._session: PromptSession[str] = PromptSession()

    async def read(self, prompt: str) -> str | None:
        try:
            # handle_sigint=False: prompt_toolkit would take over the loop's SIGINT handler and,
            # on leaving, remove it, so that every later Ctrl+C was ignored; the daemon's stays.
            return await self._session.prompt_async(prompt, handle_sigint=False)
        except EOFError:  # Ctrl-D
            return None
        except KeyboardInterrupt:
            # The keys are read raw, so Ctrl-C arrives here instead of as a signal: pass it on,
            # and the daemon stops as it does for Ctrl-C anywhere else.
            signal.raise_signal(signal.SIGINT)
            return None

    @contextlib.contextmanager
    def owning_terminal(self) -> Iterator[None]:
        from prompt_toolkit.patch_stdout import patch_stdout

        # Log lines go to whatever sys.stderr is when they are written (bot.app.log_setup): the
        # proxy prints them above the prompt and redraws it, escape sequences neutralised.
        with patch_stdout():
            yield


def open_line_input(output: TextIO) -> LineInput:
    """The terminal reader where stdin and stdout are both a terminal, else the line reader."""
    stdin_tty, stdout_tty = _isatty(sys.stdin), _isatty(output)
    if stdin_tty and stdout_tty:
        try:
            return TerminalLineInput()
        except Exception as exc:  # no usable terminal after all (or prompt_toolkit missing)
            log.warning("console: reading plain lines (%s)", exc)
    return StreamLineInput(None, output, terminal=stdin_tty)


class ConsoleChannel:
    name = "console"

    def __init__(
        self, handler: Handler, *, reader: asyncio.StreamReader | None = None, lines: LineInput | None = None,
        output: TextIO | None = None, user: str | None = None, prompt: str = "you> ",
        prompts: PromptLibrary | None = None, welcome: str = "",
    ) -> None:
        self._handler = handler
        self._output = output or sys.stdout
        if lines is None and reader is not None:
            lines = StreamLineInput(reader, self._output)
        self._lines = lines
        self._user = user or _user_name()
        self._prompt = prompt
        self._prompts = prompts or PromptLibrary("en")
        self._welcome = welcome  # how to talk, get help and leave: printed once, when the console opens
        self._reading: asyncio.Task[str | None] | None = None
        self.closed = asyncio.Event()

    async def run(self) -> None:
        """Read messages until end of input or stop(), answering each in order."""
        lines = self._lines = self._lines or open_line_input(self._output)
        if self._welcome:
            self._write(self._welcome)
        with lines.owning_terminal():
            await self._converse(lines)
        self._write("")
        self.closed.set()

    async def _read(self, lines: LineInput) -> str | None:
        """The next message; None at the end of input or once stop() interrupted the wait for it."""
        reading = self._reading = asyncio.create_task(lines.read(self._prompt), name="console-read")
        try:
            return await reading
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.closed.is_set() and (current is None or not current.cancelling()):
                return None  # stop() cancelled the read, not our caller
            raise
        finally:
            self._reading = None

    async def _converse(self, lines: LineInput) -> None:
        while not self.closed.is_set():
            try:
                text = await self._read(lines)
            except LineCut as cut:
                log.info("console: %s; not sent", cut)
                key = "console_line_cut" if cut.by_terminal else "console_line_skipped"
                self._write(self._prompts.text(key, limit=cut.limit))
                continue
            if text is None or text.strip() in QUIT:
                return
            message = InboundMessage(channel="console", chat_id=self._user, sender_id=self._user,
                                     sender_name=self._user, text=text, is_direct=True,
                                     trigger_source="console")
            printed = _Printed(self._write, self._prompts.text("reply_cut"))
            try:
                reply = await self._handler(message, printed)
            except Exception:  # the console must survive one bad turn
                log.exception("console turn failed")
                continue
            if reply:
                printed.finish(reply)

    @property
    def state(self) -> str:
        """The console has no connection to lose: "ok" until its input ends."""
        return channel_stopped("input closed") if self.closed.is_set() else CHANNEL_OK

    async def stop(self) -> None:
        """No further message is read; a reply being written is still printed."""
        self.closed.set()
        if self._reading is not None:
            self._reading.cancel()  # the prompt leaves and gives the terminal back as it found it

    async def send(self, message: OutboundMessage) -> None:
        # sys.stdout, not our own output: on a terminal it prints above the prompt.
        print(message.text, file=sys.stdout, flush=True)

    def _write(self, text: str, *, newline: bool = True) -> None:
        self._output.write(text + ("\n" if newline else ""))
        self._output.flush()


class _Printed:
    """A ReplyStream that prints the answer as it arrives, then only what the reply adds.

    `marker` ends a stream cut at mate.channels.max-reply-chars (channels.streaming.CappedStream).
    The reply was cut on its own (stripped, maybe opened by a notice, at its own offset), so it
    is not found in what was printed: the cut text stands for it, and only what the reply adds
    around its own cut is printed after it.
    """

    def __init__(self, write: Callable[..., None], marker: str = "") -> None:
        self._write = write
        self._marker = marker
        self._text = ""
        self._status = False

    def text(self, delta: str) -> None:
        if self._status:
            self._write("")
            self._status = False
        self._text += delta
        self._write(delta, newline=False)

    def status(self, line: str) -> None:
        if self._text:
            self._write("")
        self._text = ""
        if line:
            self._write(line, newline=False)
            self._status = True

    def finish(self, reply: str) -> None:
        if self._status:
            self._write("")
        printed = self._text.strip()  # the stored reply is stripped; what was printed may not be
        at = reply.find(printed) if printed else -1
        if at >= 0:
            self._write(reply[at + len(printed):])  # the rest (an apology), or just the line end
            self._opening(reply[:at])
        elif self._marker and printed.endswith(self._marker):
            self._finish_cut(reply, printed[: -len(self._marker)].strip())
        else:
            if self._text:
                self._write("")
            self._write(reply)

    def _finish_cut(self, reply: str, body: str) -> None:
        """The stream was cut: print what the reply has after its own marker (an apology), and
        what it opens with before the text printed (a missed reminder's notice)."""
        cut = reply.find(self._marker)
        self._write(reply[cut + len(self._marker):] if cut >= 0 else "")
        start = reply.find(body[:64]) if body else -1
        if start > 0:
            self._opening(reply[:start])

    def _opening(self, lead: str) -> None:
        if lead.strip():  # what the reply opens with (a missed reminder's notice), after it
            self._write(lead.strip())


async def _read_line(reader: asyncio.StreamReader) -> bytes | None:
    """The next line with its line end (b"" at the end of input), or None for a line over the
    reader's limit, skipped to its end so that its tail never arrives as a message of its own."""
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as end:
        return end.partial  # the last line had no line end
    except asyncio.LimitOverrunError as over:
        while True:
            await reader.readexactly(over.consumed)  # all of it, up to the line end if that came
            try:
                await reader.readuntil(b"\n")
                return None
            except asyncio.IncompleteReadError:
                return None
            except asyncio.LimitOverrunError as more:
                over = more


async def _open_stdin() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    # A pipe or terminal can be read without a thread, so stopping never waits on a read.
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


def _isatty(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError):  # closed or detached
        return False


def _user_name() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return os.environ.get("USER", "owner")
