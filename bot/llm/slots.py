"""CallSlots: at most max-concurrency model calls at once, and how long a waiting chat answer may queue for one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bot.core.errors import LLMBusy


class CallSlots:
    def __init__(self, limit: int, timeout: float) -> None:
        self._limit = asyncio.Semaphore(limit)
        self._timeout = timeout

    @asynccontextmanager
    async def held(self, bounded: bool) -> AsyncIterator[None]:
        """One slot, waited for at most timeout-seconds when `bounded`.

        Stuck answers elsewhere must not queue a new message behind them for minutes: it
        gets the busy apology instead (LLMBusy is not retried, that would be more waiting).
        """
        try:
            async with asyncio.timeout(self._timeout if bounded else None):
                await self._limit.acquire()
        except TimeoutError:
            raise LLMBusy(f"no free model call slot within {self._timeout:g} s") from None
        try:
            yield
        finally:
            self._limit.release()
