"""Telegram long polling bookkeeping: which fetched updates may be confirmed (SPEC S20)."""

from __future__ import annotations

import asyncio



class UpdateLedger:
    """Which fetched updates Telegram may forget: the getUpdates offset confirms every update
    below it, so it only moves past an update once that one and every older one is stored."""

    def __init__(self) -> None:
        self._open: dict[int, bool] = {}  # fetched and not yet confirmed -> stored (or needs no storing)
        self._confirmed: int | None = None  # the last offset Telegram acknowledged
        self.progress = asyncio.Event()  # set whenever an update becomes confirmable

    def is_new(self, update_id: int) -> bool:
        """Not seen before: neither in flight nor confirmed already (an update seen again is skipped)."""
        return update_id not in self._open and (self._confirmed is None or update_id >= self._confirmed)

    def fetched(self, update_id: int) -> None:
        self._open[update_id] = False

    def done(self, update_id: int) -> None:
        if update_id in self._open and not self._open[update_id]:
            self._open[update_id] = True
            self.progress.set()

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
