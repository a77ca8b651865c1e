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


class MinuteLabels:
    """"2026-12-03 10:46" in the configured zone for a stored UTC time.

    Each request labels every user message of its window with the time it was sent, so
    the labels are cached; they are derived from the stored time alone, so a message reads
    the same in every later request (the provider's prompt cache depends on it).
    """

    def __init__(self, zone_name: str) -> None:
        self._zone = zone(zone_name)
        self._labels: dict[str, str] = {}

    def __call__(self, stored: str) -> str:
        label = self._labels.get(stored)
        if label is None:
            if len(self._labels) > 50_000:
                self._labels.clear()
            try:
                label = parse_iso(stored).astimezone(self._zone).strftime("%Y-%m-%d %H:%M")
            except ValueError:
                label = ""
            self._labels[stored] = label
        return label
