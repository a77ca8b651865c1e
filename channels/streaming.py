"""ThrottledPreview: a ReplyStream for chats that show a growing reply by replacing a preview;
CappedStream: one that stops forwarding a reply past mate.channels.max-reply-chars."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from channels.base import ReplyStream
from channels.formatting import REPLY_CUT_SEPARATOR

log = logging.getLogger(__name__)

# Telegram and Discord both throttle edits per chat; one a second stays inside both.
PREVIEW_INTERVAL = 1.0
# How long the final reply waits for a preview update still on its way.
CLOSE_WAIT = 5.0


class ThrottledPreview:
    """Shows the reply as it grows through `show(text)`, at most once per `interval`.

    `show` is the channel's own primitive (a Telegram draft, an edit of one message); this
    class only decides when and what. A failed `show` ends the preview for this reply: the
    final answer is still sent as usual. `refresh` re-shows an unchanged preview that the
    chat would otherwise let expire (Telegram drops a draft after about 30 s).
    """

    def __init__(
        self, show: Callable[[str], Awaitable[None]], *, limit: int, interval: float = PREVIEW_INTERVAL,
        length: Callable[[str], int] = len, refresh: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._show = show
        self._limit = limit
        self._length = length
        self._interval = interval
        self._refresh = refresh
        self._clock = clock
        self._text = ""
        self._status = ""
        self._shown = ""
        self._last = float("-inf")
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._showing = False

    @property
    def shown(self) -> str:
        """The text the chat shows now ("" before the first update)."""
        return self._shown

    def text(self, delta: str) -> None:
        self._text += delta
        self._status = ""
        self._changed()

    def status(self, line: str) -> None:
        self._text = ""
        self._status = line
        self._changed()

    def _changed(self) -> None:
        if self._stopped:
            return
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._pump(), name="reply-preview")

    def _display(self) -> str:
        text = (self._text or self._status).strip()
        if self._length(text) > self._limit:  # the preview stops growing; the final reply is split properly
            text = text[: self._limit - 1]
            while self._length(text) > self._limit - 1:  # characters outside the BMP count twice
                text = text[:-1]
            text = text.rstrip() + "…"
        return text

    async def _pump(self) -> None:
        while not self._stopped:
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
                # lands in the same tick as the wake-up, and close() must win.
                async with asyncio.timeout(self._refresh):
                    await self._wake.wait()
            except TimeoutError:
                self._shown = ""  # shown long ago: the chat may have let it expire
            self._wake.clear()
            wait = self._last + self._interval - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            if self._stopped:
                return
            display = self._display()
            if not display or display == self._shown:
                continue
            self._last = self._clock()
            self._showing = True
            try:
                await self._show(display)
            except Exception as exc:  # the preview is a courtesy; the reply itself still goes out
                log.info("reply preview stopped: %s: %s", type(exc).__name__, exc)
                self._stopped = True
                return
            finally:
                self._showing = False
            self._shown = display

    async def close(self, wait: float = CLOSE_WAIT) -> None:
        """Stop updating. An update in progress may finish (up to `wait` seconds) so the
        final send follows it rather than races it."""
        task, self._task = self._task, None
        self._stopped = True
        if task is None:
            return
        if self._showing:
            self._wake.set()
            done, _ = await asyncio.wait({task}, timeout=wait)
            if done:
                return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class CappedStream:
    """Forwards a streamed reply to `inner` up to `limit` characters, then `marker` once and
    nothing more: a server that ignores max_tokens cannot flood a chat while it writes.

    One budget for the whole reply: a status line (a tool round, a retry) does not start the
    count again, since the sinks keep what they were shown (the console has printed it, the web
    page appends to the same bubble). After the cut even status lines stay out: the reply shown
    ends with the marker.
    """

    def __init__(self, inner: ReplyStream, limit: int, marker: str) -> None:
        self._inner = inner
        self._room = limit
        self._marker = marker
        self._cut = False

    def text(self, delta: str) -> None:
        if self._cut:
            return
        if len(delta) <= self._room:
            self._room -= len(delta)
            self._inner.text(delta)
            return
        self._cut = True
        separator = REPLY_CUT_SEPARATOR if self._room >= len(REPLY_CUT_SEPARATOR) else ""
        self._inner.text(delta[: self._room - len(separator)] + separator + self._marker)

    def status(self, line: str) -> None:
        if not self._cut:
            self._inner.status(line)
