"""Telegram long polling bookkeeping: which fetched updates may be confirmed (SPEC S20), and a
getUpdates answer read update by update, so one unreadable update is skipped alone (S30)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from telegram import Bot, Update

log = logging.getLogger(__name__)


class UpdateLedger:
    """Which fetched updates Telegram may forget: the getUpdates offset confirms every update
    below it, so it only moves past an update once that one and every older one is stored."""

    def __init__(self) -> None:
        self._open: dict[int, bool] = {}  # fetched and not yet confirmed -> stored (or needs no storing)
        self._confirmed: int | None = None  # the last offset Telegram acknowledged
        self.progress = asyncio.Event()  # set whenever an update becomes confirmable
        self._waiters: dict[int, asyncio.Event] = {}  # webhook mode: a posted update's answer waits

    def is_new(self, update_id: int) -> bool:
        """Not seen before: neither in flight nor confirmed already (an update seen again is skipped)."""
        return update_id not in self._open and (self._confirmed is None or update_id >= self._confirmed)

    def fetched(self, update_id: int) -> None:
        self._open[update_id] = False

    def skipped(self, update_id: int) -> None:
        """An update that needs no handling: the next offset confirms it (Telegram forgets it)."""
        self.fetched(update_id)
        self.done(update_id)

    def done(self, update_id: int) -> None:
        if update_id in self._open and not self._open[update_id]:
            self._open[update_id] = True
            self.progress.set()
            waiter = self._waiters.pop(update_id, None)
            if waiter is not None:
                waiter.set()

    async def until_done(self, update_id: int, timeout: float) -> bool:
        """Whether the update is stored (or needs no storing) within `timeout` seconds."""
        if self._open.get(update_id):
            return True
        waiter = self._waiters.setdefault(update_id, asyncio.Event())
        try:
            await asyncio.wait_for(waiter.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def forget(self, update_id: int) -> None:
        """Webhook mode: no offset confirms an update; once answered, it leaves the ledger."""
        self._open.pop(update_id, None)
        self._waiters.pop(update_id, None)

    def offset(self) -> int | None:
        """The oldest update not yet stored, or one past the newest when all are."""
        for update_id in sorted(self._open):
            if not self._open[update_id]:
                return update_id
        return max(self._open) + 1 if self._open else self._confirmed

    def acknowledged(self, offset: int | None) -> None:
        """A getUpdates call with `offset` succeeded: Telegram has forgotten everything below it."""
        if offset is None:
            return
        self._open = {uid: done for uid, done in self._open.items() if uid >= offset}
        self._confirmed = offset if self._confirmed is None else max(self._confirmed, offset)

    @property
    def unconfirmed(self) -> bool:
        return self.offset() != self._confirmed


@dataclass(frozen=True, slots=True)
class UpdateBatch:
    """One getUpdates answer, read update by update."""

    updates: tuple[Update, ...]
    unreadable: tuple[tuple[int, str], ...]  # (update id, error type) of updates PTB cannot read
    anonymous: int  # entries without an integer update_id: no offset can confirm them


def read_updates(entries: Sequence[object], bot: Bot) -> UpdateBatch:
    """Each entry as an Update; the ones python-telegram-bot cannot read are set aside."""
    updates: list[Update] = []
    unreadable: list[tuple[int, str]] = []
    anonymous = 0
    for entry in entries:
        if not isinstance(entry, dict) or type(update_id := entry.get("update_id")) is not int:
            anonymous += 1  # "7" and True included: only an int can be confirmed by an offset
            continue
        try:
            updates.append(Update.de_json(entry, bot))
        except Exception as exc:  # a field of the wrong shape trips whatever PTB does with it
            unreadable.append((update_id, type(exc).__name__))
    return UpdateBatch(tuple(updates), tuple(unreadable), anonymous)


def skip_unreadable(batch: UpdateBatch, ledger: UpdateLedger) -> bool:
    """Mark the unreadable updates confirmable, one log line each (the first time it is seen);
    True when there was a new one. Only the id is logged: the rest is what a user wrote."""
    skipped = False
    for update_id, error in batch.unreadable:
        if ledger.is_new(update_id):
            ledger.skipped(update_id)
            skipped = True
            log.warning("telegram update %d skipped: python-telegram-bot cannot read it (%s)", update_id, error,
                        extra={"channel": "telegram"})
    if batch.anonymous:
        log.warning("telegram skipped %d getUpdates entries without an update id", batch.anonymous,
                    extra={"channel": "telegram"})
    return skipped
