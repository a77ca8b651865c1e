"""Retry policy in one place: how long to wait before the next try, and how many tries in all.

Every wait the daemon makes after a failure comes from a `Backoff` below: the model API,
a channel reconnecting, a Telegram send, a crashed task restarting, memory extraction and
emergence. A site that knows better (a server's retry-after) says so through `wait()`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
Random = Callable[[], float]  # uniform in [0, 1), like random.random


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits of `base` seconds growing `factor`-fold per retry up to `maximum`.

    Each wait is shortened by up to `jitter` of itself, so clients that failed together do
    not all come back at the same instant. `attempts` counts the tries in all, the first
    included (None: no limit). A server's retry-after is waited as told, without jitter,
    unless it is longer than `longest_wait`: then the caller gives up rather than wait.
    """

    base: float
    maximum: float
    factor: float = 2.0
    jitter: float = 0.0
    attempts: int | None = None
    longest_wait: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.base <= self.maximum:
            raise ValueError(f"backoff base {self.base} must be between 0 and the maximum {self.maximum}")
        if self.factor < 1:
            raise ValueError(f"backoff factor {self.factor} must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"backoff jitter {self.jitter} must be between 0 and 1")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"backoff attempts {self.attempts} must be at least 1")

    def delay(self, retry: int, rand: Random = random.random) -> float:
        """The wait before retry number `retry` (0 for the first retry), whatever `attempts` says."""
        try:
            nominal = min(self.base * self.factor ** max(0, retry), self.maximum)
        except OverflowError:  # a streak long enough to overflow a float is long past the cap
            nominal = self.maximum
        return nominal * (1 - self.jitter * rand())

    def allows(self, retry: int) -> bool:
        """Whether retry number `retry` (0 for the first) may follow the `retry + 1` failed tries."""
        return self.attempts is None or retry + 1 < self.attempts

    def honours(self, retry_after: float) -> bool:
        """Whether a server's retry-after is short enough to be waited out."""
        return self.longest_wait is None or retry_after <= self.longest_wait

    def wait(self, retry: int, retry_after: float | None = None, rand: Random = random.random) -> float | None:
        """Seconds to wait before retry number `retry`, or None to give up now.

        `retry_after` is what the server asked for, if it did: it replaces the backoff.
        """
        if not self.allows(retry):
            return None
        if retry_after is not None:
            return max(0.0, retry_after) if self.honours(retry_after) else None
        return self.delay(retry, rand)


class RetryStreak:
    """The waits of one outage: each next() is one retry more; reset() once the other side answers."""

    def __init__(self, policy: Backoff, rand: Random = random.random) -> None:
        self.policy = policy
        self._rand = rand
        self.retries = 0  # waits handed out since the last reset()

    def next(self) -> float:
        delay = self.policy.delay(self.retries, self._rand)
        self.retries += 1
        return delay

    def reset(self) -> None:
        self.retries = 0


def _no_retry_after(exc: Exception) -> float | None:
    return None


async def retrying(
    call: Callable[[], Awaitable[T]], is_retryable: Callable[[Exception], bool], policy: Backoff, *,
    retry_after: Callable[[Exception], float | None] = _no_retry_after, sleep: Sleep = asyncio.sleep,
    rand: Random = random.random,
) -> T:
    """call() again after each retryable failure, as `policy` allows; the last failure is raised.

    `retry_after` reads the wait a server asked for out of a failure (None: it did not ask).
    """
    retry = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            if not is_retryable(exc):
                raise
            delay = policy.wait(retry, retry_after(exc), rand)
            if delay is None:
                raise
        retry += 1
        await sleep(delay)


# -- the policies, each with the site that uses it ------------------------------------------

# A model API call (LLM clients): attempts and longest_wait come from the llm config
# (max-retries, timeout-seconds).
MODEL_API = Backoff(base=0.5, maximum=8.0, jitter=0.25)
# A channel that cannot reach its platform, at start-up or later: 1 s doubling to 60 s,
# each wait 80-100 % of that; for ever, until the network returns.
CHANNEL_RECONNECT = Backoff(base=1.0, maximum=60.0, jitter=0.2)
# One Telegram message chunk: network errors and 5xx get 0.5 s, then 1 s; a 429's
# retry_after is waited as told; three tries in all.
TELEGRAM_SEND = Backoff(base=0.5, maximum=1.0, attempts=3)
# A daemon task (channel, memory worker) that crashed: restarted after 1 s doubling to 60 s.
CRASH_RESTART = Backoff(base=1.0, maximum=60.0)
# A failed model call of memory work, in process: extraction and emergence alike try
# three times, 1 s then 4 s apart.
MEMORY_MODEL_CALL = Backoff(base=1.0, maximum=4.0, factor=4.0, attempts=3)
# An extraction that failed even so: its durable pending row is tried again after 60 s,
# then 300 s; after the third failure it is given up and recorded as failed.
PENDING_EXTRACTION = Backoff(base=60.0, maximum=300.0, factor=5.0, attempts=3)
# An embeddings endpoint that stopped answering: asked again after 1 s doubling to 300 s.
EMBEDDINGS_ENDPOINT = Backoff(base=1.0, maximum=300.0)
