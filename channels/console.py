"""ConsoleChannel: a line-based chat on stdin/stdout for the owner (trusted, S13)."""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TextIO

from channels.base import ChannelCapabilities, InboundMessage, OutboundMessage, ReplyStream

log = logging.getLogger(__name__)

Handler = Callable[[InboundMessage, ReplyStream], Awaitable[str | None]]


class ConsoleChannel:
    name = "console"
    capabilities = ChannelCapabilities(max_message_length=1 << 20)

    def __init__(
        self, handler: Handler, *, reader: asyncio.StreamReader | None = None,
        output: TextIO | None = None, user: str | None = None, prompt: str = "you> ",
    ) -> None:
        self._handler = handler
        self._reader = reader
        self._output = output or sys.stdout
        self._user = user or _user_name()
        self._prompt = prompt
        self.closed = asyncio.Event()

    async def _open_stdin(self) -> asyncio.StreamReader:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        # A pipe or terminal can be read without a thread, so stopping never waits on a read.
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        return reader

    async def run(self) -> None:
        """Read lines until end of input; each line is one message, answered in order."""
        reader = self._reader or await self._open_stdin()
        while True:
            self._write(self._prompt, newline=False)
            raw = await reader.readline()
            if not raw:
                break
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if text.strip() in ("/quit", "/exit"):
                break
            message = InboundMessage(channel="console", chat_id=self._user, sender_id=self._user,
                                     sender_name=self._user, text=text, is_direct=True,
                                     trigger_source="console")
            printed = _Printed(self._write)
            try:
                reply = await self._handler(message, printed)
            except Exception:  # the console must survive one bad turn
                log.exception("console turn failed")
                continue
            if reply:
                printed.finish(reply)
        self._write("")
        self.closed.set()

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.closed.set()

    async def send(self, message: OutboundMessage) -> None:
        self._write(message.text)

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        return None

    def _write(self, text: str, *, newline: bool = True) -> None:
        self._output.write(text + ("\n" if newline else ""))
        self._output.flush()


class _Printed:
    """A ReplyStream that prints the answer as it arrives, then only what the reply adds."""

    def __init__(self, write: Callable[..., None]) -> None:
        self._write = write
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
        if printed and reply.startswith(printed):
            self._write(reply[len(printed):])  # the rest (an apology), or just the line end
        else:
            if self._text:
                self._write("")
            self._write(reply)


def _user_name() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return os.environ.get("USER", "owner")
