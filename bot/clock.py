"""Time as matebot uses it: UTC instants stored as ISO-8601, dates in the configured zone."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone, tzinfo
from zoneinfo import ZoneInfo

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso(moment: datetime) -> str:
    """The stored form: UTC, millisecond precision."""
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def parse_iso(text: str) -> datetime:
    """A stored time back as an aware datetime (naive values are taken as UTC)."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def zone(name: str) -> tzinfo:
    """An IANA zone, or the system's own for "local"."""
    if name == "local":
        local = datetime.now().astimezone().tzinfo
        assert local is not None
        return local
    return ZoneInfo(name)


def local_date(name: str, now: datetime | None = None) -> str:
    """The date (YYYY-MM-DD) of `now` (default: this moment) in the configured zone."""
    moment = now or utc_now()
    local = moment.astimezone() if name == "local" else moment.astimezone(ZoneInfo(name))
    return local.date().isoformat()
