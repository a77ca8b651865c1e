"""CallSlots: the model calls in flight at once (mate.llm.slots), a waiting chat answer served before memory work."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bot.core.errors import LLMBusy


class CallSlots:
    """At most `limit` calls hold a slot; a freed slot goes to the longest-waiting chat call
    (bounded: chat turns and their summaries), and only when none waits to memory work.

    A local server often has one slot: an extraction taking it while a person waits holds
    their reply for as long as the extraction runs (9-60 s measured on a small model).
    A call already holding a slot is never interrupted; chat goes first at the next hand-over.
    """

    def __init__(self, limit: int, timeout: float) -> None:
        self._free = limit
        self._timeout = timeout
        self._chat: deque[asyncio.Future[None]] = deque()
        self._memory: deque[asyncio.Future[None]] = deque()

    @property
    def chat_waiting(self) -> int:
        """Chat calls queued for a slot now."""
        return sum(1 for f in self._chat if not f.done())

    @property
    def memory_waiting(self) -> int:
        """Memory calls queued for a slot now."""
        return sum(1 for f in self._memory if not f.done())

    @asynccontextmanager
    async def held(self, bounded: bool) -> AsyncIterator[None]:
        """One slot, waited for at most timeout-seconds when `bounded` (a chat or summary call,
        which also goes first); memory work waits as long as it takes.

        Stuck answers elsewhere must not queue a new message behind them for minutes: it
        gets the busy apology instead (LLMBusy is not retried, that would be more waiting).
        """
        try:
            async with asyncio.timeout(self._timeout if bounded else None):
                await self._acquire(first=bounded)
        except TimeoutError:
            raise LLMBusy(f"no free model call slot within {self._timeout:g} s") from None
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, *, first: bool) -> None:
        # Memory work does not take a free slot while a chat call waits (the hand-over in
        # _release gives it to that call at once, so this only closes a same-tick gap).
        if self._free > 0 and (first or not self.chat_waiting):
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._chat if first else self._memory
        queue.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed a slot in the same tick as the cancel: pass it on
            else:
                waiter.cancel()
            raise
        finally:
            if waiter in queue:
                queue.remove(waiter)

    def _release(self) -> None:
        for queue in (self._chat, self._memory):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # the slot passes straight to it: no free count in between
                    return
        self._free += 1
