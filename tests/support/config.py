"""A test's configuration: a Config over a database in tmp_path, and a clock pinned to a fixed start."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

from bot.core.clock import Clock
from bot.core.config import Config, parse_config

# A Wednesday: rows written "now" by a pinned clock are dated on no weekend and on no date a
# test names (the search index finds rows by their weekday, and the suite runs on any day).
PINNED_START = datetime(2026, 3, 4, 12, 0, tzinfo=timezone.utc)


# Tests read an extraction right after the exchange that asked for it; the pause before one
# (idle-minutes) is tested where a test sets it.
TEST_MEMORY: dict[str, object] = {"idle-minutes": 0}


def make_config(tmp_path: Path, **mate: object) -> Config:
    """A Config whose database lives in tmp_path; `mate` overrides keys (kebab-case dicts)."""
    data: dict[str, object] = {"database": {"path": str(tmp_path / "mate.db")}, "timezone": "UTC",
                               "memory": dict(TEST_MEMORY)}
    memory = mate.pop("memory", None)
    if isinstance(memory, dict):
        data["memory"] = {**TEST_MEMORY, **memory}
    elif memory is not None:
        data["memory"] = memory
    data.update(mate)
    return parse_config({"mate": data}, environ={})


def pinned_clock(start: datetime = PINNED_START) -> Clock:
    """A clock that starts at `start` and runs on with this machine's monotonic time."""
    origin = time.monotonic()

    def now() -> datetime:
        return datetime.fromtimestamp(start.timestamp() + time.monotonic() - origin, timezone.utc)

    return now
