"""When a task runs: five-field cron and ISO 8601 times in a time zone, next runs and repeats, DST included."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger

from bot.core.clock import zone as configured_zone

_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# A date alone ("2026-12-04") would mean midnight: a person never asks for that without saying so.
_HAS_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
# Enough consecutive runs to meet every gap of a day's pattern and the turn of a day.
_GAP_SAMPLES = 400
# How many missed runs the catch-up walks through to find the latest (every 15 minutes for
# four years); a longer sleep counts as missed.
_MAX_WALK = 150_000


class OutOfRange(ValueError):
    """A date and time the calendar cannot hold once moved to UTC or to its zone (year 1 or 9999)."""


def resolve_zone(name: str) -> tzinfo | None:
    """The tzinfo of a job's zone; None for "local" (APScheduler then uses the host's zone)."""
    if not name or name == "local":
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None


def zone_of(name: str) -> tzinfo:
    """The zone a task's local times are read in ("local": the host's)."""
    if name != "local":
        resolve_zone(name)  # the same error for every unknown name
    return configured_zone(name)


def parse_cron(expression: str, zone: str) -> CronTrigger:
    """A CronTrigger for a standard five-field crontab line, evaluated in `zone`.

    APScheduler 3 numbers weekdays from Monday=0, crontab from Sunday=0 (7 also Sunday),
    so the day-of-week field is rewritten into day names first: "0 2 * * 0" is Sunday.
    Unlike cron, a restricted day-of-month AND day-of-week must both match.
    Raises ValueError for anything else.
    """
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"expected five fields, got {len(fields)}")
    fields[4] = _crontab_weekdays(fields[4])
    return CronTrigger.from_crontab(" ".join(fields), timezone=resolve_zone(zone))


def _crontab_weekdays(field: str) -> str:
    if field in ("*", "?"):
        return "*"
    days: set[int] = set()
    for part in field.split(","):
        body, slash, step_text = part.partition("/")
        if slash and not step_text.isdigit():
            raise ValueError(f"bad day-of-week {part!r}")
        step = int(step_text) if slash else 1
        if body == "*":
            low, high = 0, 6
        elif "-" in body:
            start, end = body.split("-", 1)
            low, high = _crontab_day(start), _crontab_day(end)
        else:
            low = _crontab_day(body)
            high = 6 if slash else low
        if step < 1 or low > high:
            raise ValueError(f"bad day-of-week {part!r}")
        days.update(day % 7 for day in range(low, high + 1, step))
    return ",".join(_DAY_NAMES[day] for day in sorted(days))


def _crontab_day(text: str) -> int:
    value = text.strip().lower()
    if value.isdigit() and 0 <= int(value) <= 7:
        return int(value)
    if value in _DAY_NAMES:
        return _DAY_NAMES.index(value)
    raise ValueError(f"bad day-of-week {text!r}")


def parse_at(text: str, zone_name: str) -> datetime:
    """An ISO 8601 date-time as an instant: local to `zone_name`, or absolute with an offset.

    Raises ValueError naming what is wrong; OutOfRange when it is a real date the calendar
    cannot move to UTC (9999-12-31T23:00-05:00 would be in the year 10000)."""
    value = text.strip()
    if not _HAS_TIME.match(value):
        raise ValueError(f"{text[:40]!r} is not an ISO 8601 date and time such as 2026-12-04T09:00:00")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not an ISO 8601 date and time such as 2026-12-04T09:00:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone_of(zone_name))
    try:
        return moment.astimezone(timezone.utc)
    except OverflowError:
        raise OutOfRange(f"{text[:40]!r} is out of range") from None


def next_fire(trigger: CronTrigger, after: datetime) -> datetime | None:
    """The first run strictly after `after` (an aware instant), in UTC. As cron does, a task set
    for a fixed hour runs once in the hour a fall-back to winter time repeats, not twice."""
    start = after + timedelta(microseconds=1)
    plain: datetime | None = trigger.get_next_fire_time(None, start)
    found = plain
    for _ in range(_REPEATED_MINUTES):
        if found is None:
            return None
        if found > after and not _repeated_hour(trigger, found):
            return found.astimezone(timezone.utc)
        # On by a minute (fires are whole minutes): inside the repeated hour APScheduler may read
        # a time as its first pass and hand back this fire, or one before `after`.
        start = max(found, start) + timedelta(minutes=1)
        found = trigger.get_next_fire_time(None, start)
    return plain.astimezone(timezone.utc) if plain is not None else None


_HOUR_FIELD = CronTrigger.FIELD_NAMES.index("hour")
_REPEATED_MINUTES = 24 * 60  # a repeated stretch is an hour or two: this bounds the walk past it


def _repeated_hour(trigger: CronTrigger, moment: datetime) -> bool:
    """The second pass through a wall-clock hour that a fall-back repeats, for a trigger whose
    hour is not every hour (a task every 15 minutes still runs through both passes)."""
    zone = trigger.timezone
    return zone is not None and moment.astimezone(zone).fold == 1 and str(trigger.fields[_HOUR_FIELD]) != "*"


def shortest_gap(trigger: CronTrigger, start: datetime) -> timedelta | None:
    """The shortest time between two consecutive runs from `start` on (None: it runs at most once)."""
    shortest: timedelta | None = None
    previous = next_fire(trigger, start)
    for _ in range(_GAP_SAMPLES):
        if previous is None:
            break
        following = next_fire(trigger, previous)
        if following is None:
            break
        gap = following - previous
        shortest = gap if shortest is None else min(shortest, gap)
        previous = following
    return shortest


def latest_due(trigger: CronTrigger, due: datetime, now: datetime) -> datetime:
    """The last run at or before `now`, walking on from the missed run `due`."""
    latest = due
    for _ in range(_MAX_WALK):
        following = next_fire(trigger, latest)
        if following is None or following > now:
            return latest
        latest = following
    return latest


def local_text(moment: datetime, zone_name: str) -> str:
    """An instant as the task's zone shows it, with its offset: 2026-12-04T09:00:00+01:00."""
    return moment.astimezone(zone_of(zone_name)).isoformat(timespec="seconds")
