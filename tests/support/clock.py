"""A clock the test moves by hand, for the pieces that take an injected clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta


class SteppedClock:
    """A clock the test sets; it stands still in between."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def set(self, moment: datetime) -> None:
        self.now = moment

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def local_at(clock: Callable[[], datetime], seconds: float) -> str:
    """`at` as a model writes it: local (UTC in the tests) date and time, `seconds` after `clock`'s now."""
    return (clock() + timedelta(seconds=seconds)).replace(tzinfo=None).isoformat(timespec="seconds")
