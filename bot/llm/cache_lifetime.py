"""How long a chat request asks the provider to keep its cached prefix: `mate.llm.cache` and the conversation's pace."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from bot.llm.port import CacheTtl

CacheMode = Literal["auto", "5m", "1h", "off"]

# A conversation with a turn this recent is likely to go on within the hour (three hours
# measured 7 % cheaper on the day bench: too little to leave the hour).
ACTIVE_WITHIN = timedelta(hours=1)
# How long the provider keeps an entry written with each `ttl` (from its last read).
CACHE_LIFETIMES: dict[CacheTtl, timedelta] = {"5m": timedelta(minutes=5), "1h": timedelta(hours=1)}


def still_cached(sent_at: datetime, lifetime: timedelta, now: datetime) -> bool:
    """An entry written at `sent_at` is still in the provider's cache (a clock moved back: not trusted)."""
    return timedelta(0) <= now - sent_at < lifetime


def is_active(last_turn_at: datetime | None, now: datetime) -> bool:
    """A turn within ACTIVE_WITHIN. A stored time after `now` (a clock moved back) is not trusted."""
    if last_turn_at is None:
        return False
    return timedelta(0) <= now - last_turn_at <= ACTIVE_WITHIN


def cache_lifetime(mode: CacheMode, last_turn_at: datetime | None, now: datetime) -> CacheTtl | None:
    """The lifetime of every breakpoint of a chat request (the stable prefix and the history); None: off.

    `auto`: the 1-hour cache while the conversation is active. Its turns come minutes apart, and
    a third of those gaps outlive a 5-minute entry, so the whole history would be written again
    at 1.25x where the 1-hour entry (written once at 2x) is read at 0.1x. After ACTIVE_WITHIN of
    silence the next turn may not come within the hour at all: the 5-minute write is cheaper.
    The history gets the same lifetime as the prefix: on the day bench with a system prompt
    that stays put, 1 hour on the prefix alone saved under 2 % (the prefix is small beside
    the history), on both 12 %.
    """
    if mode == "off":
        return None
    if mode == "auto":
        return "1h" if is_active(last_turn_at, now) else "5m"
    return mode
