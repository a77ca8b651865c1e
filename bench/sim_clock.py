"""SimClock: simulated time for a bench — the daemon's clock, its sleeps and the fake API's cache clock in one."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta


class SimClock:
    """A moment the bench moves forward itself; `sleep` waits for the simulated time, not the real one.

    Used as a `bot.core.clock.Clock` (called: an aware datetime), as a `Sleep`, and, through
    `seconds()`, as the fake Messages API's cache clock, so that caches expire and cooldowns end
    when the simulated gaps say, while the bench itself runs in seconds.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("SimClock needs an aware start time")
        self.now = start
        self._sleepers: list[tuple[datetime, int, asyncio.Future[None]]] = []
        self._order = itertools.count()  # equal deadlines wake in the order they went to sleep

    def __call__(self) -> datetime:
        return self.now

    def seconds(self) -> float:
        """The moment as a POSIX timestamp (the fake's cache clock counts seconds)."""
        return self.now.timestamp()

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + timedelta(seconds=seconds), next(self._order), future))
        await future

    async def advance_to(self, moment: datetime, settle: Callable[[], Awaitable[object]]) -> int:
        """Move to `moment`, waking each sleeper whose deadline comes first at that deadline and
        awaiting `settle()` (the woken work finishing) before the next; returns how many woke."""
        woken = 0
        while self._sleepers and self._sleepers[0][0] <= moment:
            deadline, _, future = heapq.heappop(self._sleepers)
            if future.done():  # its task was cancelled meanwhile
                continue
            self.now = max(self.now, deadline)
            future.set_result(None)
            woken += 1
            await settle()
        self.now = max(self.now, moment)
        return woken
