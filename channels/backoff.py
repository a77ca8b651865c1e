"""How long a channel waits before it tries to reach its platform again (SPEC S20)."""

from __future__ import annotations

import random
from collections.abc import Callable

BACKOFF_BASE = 1.0  # SPEC S20: 1 s doubling to 60 s, with jitter
BACKOFF_MAX = 60.0
BACKOFF_JITTER = 0.2  # each wait is 80-100 % of the nominal delay


def backoff_delay(failures: int, base: float = BACKOFF_BASE, cap: float = BACKOFF_MAX,
                  jitter: float = BACKOFF_JITTER, rand: Callable[[], float] = random.random) -> float:
    """The wait before retry number failures+1: base doubling up to cap, minus up to `jitter` of it."""
    nominal = min(base * 2 ** min(failures, 32), cap)
    return nominal * (1 - jitter * rand())
