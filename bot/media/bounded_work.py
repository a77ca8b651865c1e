"""CPU-heavy work in worker threads, given up after a time limit and stopped by a deadline it checks.

A thread cannot be killed: when the event loop stops waiting for one, the work keeps the
thread (and, in pure Python, a share of the GIL) until it returns. So the work takes a
`Deadline` and calls `check()` in its loops; the runner stops the deadline when it gives up
(or is cancelled at shutdown), and the work ends at its next check instead of running on.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# Two threads at once: one slow file never blocks another user's picture, and a burst of
# files cannot take every core (nor the event loop's default executor, which name lookups use).
DEFAULT_PARALLEL = 2


class WorkTimedOut(Exception):
    """The work did not finish within its time limit (or was stopped)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"not finished within {seconds:g} s")
        self.seconds = seconds


class Deadline:
    """The moment work must stop; thread-safe, checked by the work itself."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds
        self._stopped = threading.Event()

    def stop(self) -> None:
        """Nobody waits for the result any more: the next check() ends the work."""
        self._stopped.set()

    @property
    def expired(self) -> bool:
        return self._stopped.is_set() or self._clock() >= self._end

    def check(self) -> None:
        """Raises WorkTimedOut once the time is up or the waiter gave up."""
        if self.expired:
            raise WorkTimedOut(self.seconds)


class ThreadWorkRunner:
    """Runs `work(deadline)` in a small thread pool of its own, waiting at most `limit` seconds.

    The wait counts from the call, so time spent queued behind other work is part of it.
    """

    def __init__(self, parallel: int = DEFAULT_PARALLEL, *, name: str = "matebot-work") -> None:
        self._pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix=name)

    async def run(self, work: Callable[[Deadline], T], limit: float) -> T:
        """work's result; WorkTimedOut when it takes longer than `limit` seconds."""
        deadline = Deadline(limit)
        future = asyncio.wrap_future(self._pool.submit(work, deadline))
        try:
            return await asyncio.wait_for(future, limit)
        except TimeoutError:
            raise WorkTimedOut(limit) from None
        finally:
            # Done, timed out or cancelled: a thread still running sees this at its next check;
            # work still queued was cancelled with the future and never starts.
            deadline.stop()

    def close(self) -> None:
        """Drops queued work; running work ends at its next deadline check."""
        self._pool.shutdown(wait=False, cancel_futures=True)
