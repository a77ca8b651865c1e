"""ThrottledPreview: a ReplyStream for chats that show a growing reply by replacing a preview."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# Telegram and Discord both throttle edits per chat; one a second stays inside both.
PREVIEW_INTERVAL = 1.0


class ThrottledPreview:
    """Shows the reply as it grows through `show(text)`, at most once per `interval`.

    `show` is the channel's own primitive (a Telegram draft, an edit of one message); this
    class only decides when and what. A failed `show` ends the preview for this reply: the
    final answer is still sent as usual.
    """

    def __init__(
        self, show: Callable[[str], Awaitable[None]], *, limit: int, interval: float = PREVIEW_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._show = show
        self._limit = limit
        self._interval = interval
        self._clock = clock
        self._text = ""
        self._status = ""
        self._shown = ""
        self._last = float("-inf")
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._broken = False
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
        if self._broken:
            return
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._pump(), name="reply-preview")

    def _display(self) -> str:
        text = (self._text or self._status).strip()
        if len(text) > self._limit:  # the preview stops growing; the final reply is split properly
            text = text[: self._limit - 1].rstrip() + "…"
        return text

    async def _pump(self) -> None:
        while not self._broken:
            await self._wake.wait()
            self._wake.clear()
            wait = self._last + self._interval - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            display = self._display()
            if not display or display == self._shown:
                continue
            self._last = self._clock()
            self._showing = True
            try:
                await self._show(display)
            except Exception as exc:  # the preview is a courtesy; the reply itself still goes out
                log.info("reply preview stopped: %s: %s", type(exc).__name__, exc)
                self._broken = True
                return
            finally:
                self._showing = False
            self._shown = display

    async def close(self) -> None:
        """Stop updating; an update in progress is let finish so the final send follows it."""
        task, self._task = self._task, None
        self._broken = True
        if task is None:
            return
        if self._showing:  # cancelling a send half-way would leave us not knowing what the chat shows
            self._wake.set()
            await asyncio.gather(task, return_exceptions=True)
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
