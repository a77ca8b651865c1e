"""ConsoleChannel: a line-based chat on stdin/stdout for the owner (trusted, S13)."""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TextIO

from channels.base import ChannelCapabilities, InboundMessage, OutboundMessage

log = logging.getLogger(__name__)

Handler = Callable[[InboundMessage], Awaitable[str | None]]


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
            try:
                reply = await self._handler(message)
            except Exception:  # the console must survive one bad turn
                log.exception("console turn failed")
                continue
            if reply:
                self._write(reply)
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


def _user_name() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return os.environ.get("USER", "owner")
