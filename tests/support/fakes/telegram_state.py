"""What the fake Telegram holds and recorded, and how a test or a long poll waits until it changes."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any, Callable

# (time.monotonic() at receipt, method, chat_id, text) of a text a user could now see.
Visible = tuple[float, str, Any, str]


class TelegramState:
    """The bot, the chats, messages, files and updates the fake holds, and what it received.

    The base of FakeTelegram and of the parts it is made of (updates, media, methods), so
    that each part sees the same state. Every change calls `_notify()`, which wakes waiters.
    """

    token: str = "123456:TEST"

    def __init__(self) -> None:
        self.bot_user: dict[str, Any] = {
            "id": 999,
            "is_bot": True,
            "first_name": "Mate",
            "username": "mate_bot",
        }
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[dict[str, Any]] = []
        self.webhook: dict[str, Any] | None = None  # setWebhook's parameters while one is set
        self.drafts: list[dict[str, Any]] = []  # params of every accepted sendMessageDraft
        self.edits: list[dict[str, Any]] = []  # params of every accepted editMessageText
        self.deleted: list[dict[str, Any]] = []  # params of every accepted deleteMessage
        self.downloads: list[str] = []  # file paths fetched from the file endpoint
        self._files: dict[str, tuple[bytes, str]] = {}  # file_id -> (content, file_path)
        self.visible: list[Visible] = []
        self.commands: list[dict[str, Any]] = []
        self._updates: list[Any] = []  # update dicts, or whatever push_raw() queued
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._messages: dict[tuple[Any, int], dict[str, Any]] = {}
        self._chat_types: dict[Any, str] = {}
        self.offsets: list[int | None] = []  # the offset of each getUpdates call, in order
        self.handed_out: list[list[int | None]] = []  # the update ids each getUpdates answer held
        self._serving = False
        # Replaced on every change so waiters (long polls, wait_for_sent) wake and re-check.
        self._changed = asyncio.Event()
        self._closing = False

    # -- what it received --------------------------------------------------------------------

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == method]

    async def wait_for_sent(self, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        if not await self._wait_until(lambda: len(self.sent) >= count, timeout):
            raise AssertionError(
                f"expected {count} sent message(s) within {timeout}s, got {len(self.sent)}: "
                f"{self.sent!r}; calls: {[name for name, _ in self.calls]}"
            )
        return list(self.sent)

    async def wait_for_call(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        """The parameters of the first call of `method`, waiting for it to arrive."""
        if not await self._wait_until(lambda: bool(self.calls_of(method)), timeout):
            raise AssertionError(f"no {method} call within {timeout}s; calls: {[name for name, _ in self.calls]}")
        return self.calls_of(method)[0]

    async def wait_for_visible(
        self, predicate: Callable[[Visible], bool] = lambda entry: True, timeout: float = 30.0
    ) -> Visible:
        """The first entry of `visible` that matches `predicate`, waiting for it to arrive."""

        def first() -> Visible | None:
            return next((entry for entry in self.visible if predicate(entry)), None)

        if not await self._wait_until(lambda: first() is not None, timeout):
            raise AssertionError(f"no matching visible text within {timeout}s; visible: {self.visible!r}")
        entry = first()
        assert entry is not None
        return entry

    # -- waiting -----------------------------------------------------------------------------

    def _show(self, method: str, chat_id: Any, text: str) -> None:
        # Handlers run with no await after the request body is read: now is its receipt time.
        self.visible.append((time.monotonic(), method, chat_id, text))
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return predicate()
        return True
