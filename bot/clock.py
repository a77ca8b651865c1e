"""Time zones as configured: an IANA name or "local"."""

from __future__ import annotations

from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo


def zone(name: str) -> tzinfo:
    if name == "local":
        local = datetime.now().astimezone().tzinfo
        assert local is not None
        return local
    return ZoneInfo(name)


def local_date(name: str, now: datetime | None = None) -> str:
    """Today's date (YYYY-MM-DD) in the configured zone."""
    moment = now or datetime.now(zone(name))
    return moment.astimezone(zone(name)).date().isoformat()
