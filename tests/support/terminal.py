"""A pseudo-terminal with a screen emulator around a matebot process, for the console tests."""

from __future__ import annotations

import asyncio
import codecs
import os
from collections.abc import Callable
from pathlib import Path

import pyte



ROWS, COLUMNS = 24, 100
BRACKETED_PASTE_ON, BRACKETED_PASTE_OFF = "\x1b[?2004h", "\x1b[?2004l"
REPO = Path(__file__).resolve().parents[2]
PROMPT = "you> "


class Terminal:
    """The master side of a pty with `matebot chat` on the other; the screen as a terminal shows it."""

    def __init__(self, master: int, process: asyncio.subprocess.Process) -> None:
        self.master = master
        self.process = process
        self.raw = ""  # everything the program wrote, escape sequences included
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.screen.write_process_input = self._answer  # type: ignore[method-assign]  # cursor position reports
        self._stream = pyte.Stream(self.screen)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        asyncio.get_running_loop().add_reader(master, self._on_output)

    def _on_output(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the program closed its side
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.master)
            return
        text = self._decoder.decode(data)
        self.raw += text
        self._stream.feed(text)

    def _answer(self, data: str) -> None:
        os.write(self.master, data.encode())

    @property
    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def shows(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    @property
    def bracketed_paste(self) -> bool:
        """Whether the program asked for pasted text to be marked, as terminals then do."""
        return self.raw.rfind(BRACKETED_PASTE_ON) > self.raw.rfind(BRACKETED_PASTE_OFF)

    async def type(self, text: str) -> None:
        """Key presses, sent as a terminal sends them: Enter is a carriage return."""
        data = text.replace("\n", "\r").encode()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while data:
            try:
                written = os.write(self.master, data)
            except BlockingIOError:  # the program has not read what came before yet
                written = 0
            data = data[written:]
            if data:
                if loop.time() > deadline:
                    raise AssertionError("the program stopped reading its terminal")
                await asyncio.sleep(0.01)

    async def paste(self, text: str) -> None:
        """A paste: marked as one when the program turned bracketed paste on, else plain keys."""
        if self.bracketed_paste:
            await self.type("\x1b[200~" + text.replace("\n", "\r") + "\x1b[201~")
        else:
            await self.type(text)


async def wait_for(condition: Callable[[], object], what: str, terminal: Terminal, timeout: float = 60) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            screen = "\n".join(terminal.lines)
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; the screen:\n{screen}")
        await asyncio.sleep(0.02)
