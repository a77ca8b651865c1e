"""Shared fixtures: a migrated SQLite file in tmp_path and the core services over it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bot.app.core import Core, open_core
from bot.core.clock import Clock
from bot.core.config import Config, parse_config

# A Wednesday: rows written "now" by a pinned clock are dated on no weekend and on no date a
# test names (the search index finds rows by their weekday, and the suite runs on any day).
PINNED_START = datetime(2026, 3, 4, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def _loopback_without_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx and aiohttp obey proxy variables even for 127.0.0.1; our fakes live there.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    # PTB warns (an error under filterwarnings=error) unless its timedelta API is chosen.
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "MATE_CONFIG", "MATE_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def make_config(tmp_path: Path, **mate: object) -> Config:
    """A Config whose database lives in tmp_path; `mate` overrides keys (kebab-case dicts)."""
    data: dict[str, object] = {"database": {"path": str(tmp_path / "mate.db")}, "timezone": "UTC"}
    data.update(mate)
    return parse_config({"mate": data}, environ={})


def pinned_clock(start: datetime = PINNED_START) -> Clock:
    """A clock that starts at `start` and runs on with this machine's monotonic time."""
    origin = time.monotonic()

    def now() -> datetime:
        return datetime.fromtimestamp(start.timestamp() + time.monotonic() - origin, timezone.utc)

    return now


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path)


@pytest.fixture
async def core(config: Config) -> AsyncIterator[Core]:
    async with open_core(config) as opened:
        yield opened
