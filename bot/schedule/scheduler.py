"""CronScheduler: runs the jobs of mate_cron_job on an APScheduler AsyncIOScheduler (SPEC S8)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import Any, Protocol

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger

from bot.core.clock import Clock, iso, parse_iso, utc_now
from bot.storage import Repositories
from bot.core.records import CronJobRecord
from bot.schedule.timing import parse_cron, resolve_zone

log = logging.getLogger(__name__)

__all__ = ["CronJobRunner", "CronScheduler", "missed_while_down", "parse_cron", "resolve_zone"]


# None = "run however late": a fire delayed by a suspended host still runs (once, since
# coalesce folds the backlog into one run), matching the catch-up rule for restarts.
MISFIRE_GRACE_TIME: int | None = None


class CronJobRunner(Protocol):
    """What a fired job does; implemented by the composition root (agent run / emergence)."""

    async def run_text_job(self, job: CronJobRecord) -> None: ...

    async def run_emergence_job(self, job: CronJobRecord) -> None: ...


def _iso(moment: datetime | None) -> str | None:
    return iso(moment) if moment else None


def _parse_time(text: str | None) -> datetime | None:
    """A stored time, or None when absent or unreadable (a hand-edited row must not stop us)."""
    if not text:
        return None
    try:
        return parse_iso(text)
    except ValueError:
        return None


def missed_while_down(job: CronJobRecord, trigger: CronTrigger, now: datetime) -> bool:
    """True when a fire time passed since the job last ran, or since it was created if it never ran.

    Counting from create_time means a job added while the daemon was down is not "missed"
    for the days before it existed; counting from the later of the two means one catch-up
    covers any number of missed days.
    """
    seen = [t for t in (_parse_time(job.last_run_time), _parse_time(job.create_time)) if t]
    if not seen:
        return False
    # +1µs: a fire time equal to the reference is the run that already happened.
    first_fire = trigger.get_next_fire_time(None, max(seen) + timedelta(microseconds=1))
    return first_fire is not None and first_fire <= now


@dataclass(frozen=True, slots=True)
class _Loaded:
    record: CronJobRecord
    trigger: CronTrigger


def _definition(job: CronJobRecord) -> tuple[Any, ...]:
    return (job.agent_id, job.name, job.cron_expression, job.timezone, job.task_type, job.trigger_message)


class CronScheduler:
    """Mirrors the enabled rows of mate_cron_job into APScheduler and records every run."""

    def __init__(
        self, repos: Repositories, runner: CronJobRunner, *, timezone: str, clock: Clock = utc_now,
        reload_interval: float = 30.0,
    ) -> None:
        self._repos = repos
        self._runner = runner
        self._timezone = timezone
        self._clock = clock
        self._reload_interval = reload_interval
        self._aps: AsyncIOScheduler | None = None
        self._jobs: dict[int, _Loaded] = {}
        self._fingerprint = ""
        self._lock = asyncio.Lock()
        self._poller: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[Any]] = set()
        self._closing = False

    async def __aenter__(self) -> CronScheduler:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()

    async def start(self) -> None:
        self._closing = False
        self._aps = AsyncIOScheduler(
            timezone=resolve_zone(self._timezone),
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": MISFIRE_GRACE_TIME},
        )
        self._aps.start()
        await self._load(at_startup=True)
        self._poller = asyncio.create_task(self._poll(), name="cron-reload")

    async def shutdown(self) -> None:
        """Stop firing, cancel runs in progress (they are not marked run, so start-up catches them up)."""
        if self._aps is None:
            return
        self._closing = True
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        # No jobs left means a wakeup already queued on the loop has nothing to submit.
        self._aps.remove_all_jobs()
        self._aps.shutdown(wait=False)
        while self._aps.running:  # AsyncIOScheduler shuts down in a loop callback
            await asyncio.sleep(0)
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        self._aps = None
        self._jobs.clear()

    async def reload(self) -> None:
        """Re-read mate_cron_job now (call after adding, editing or disabling a job)."""
        await self._load(at_startup=False)

    def run_now(self, job_id: int) -> bool:
        """Fire a loaded job at once through the scheduler (still one instance at a time)."""
        if self._aps is None or job_id not in self._jobs:
            return False
        self._aps.modify_job(str(job_id), next_run_time=datetime.now(timezone.utc))
        return True

    def next_run_times(self) -> dict[int, datetime | None]:
        """Job id -> next fire time of every scheduled job."""
        if self._aps is None:
            return {}
        return {int(job.id): job.next_run_time for job in self._aps.get_jobs()}

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._reload_interval)
            try:
                if await self._repos.cron_jobs.fingerprint() != self._fingerprint:
                    await self.reload()
            except Exception:
                log.exception("reloading cron jobs failed; retrying in %ss", self._reload_interval)

    async def _load(self, *, at_startup: bool) -> None:
        async with self._lock:
            aps = self._aps
            if aps is None:
                return
            # Taken before listing: a change made in between shows up at the next poll.
            fingerprint = await self._repos.cron_jobs.fingerprint()
            wanted: dict[int, _Loaded] = {}
            for job in await self._repos.cron_jobs.list(enabled_only=True):
                try:
                    trigger = parse_cron(job.cron_expression, job.timezone or self._timezone)
                except ValueError as exc:
                    log.warning("cron job %s (%s) skipped: %r: %s", job.id, job.name, job.cron_expression, exc)
                    continue
                wanted[job.id] = _Loaded(job, trigger)
            for job_id in set(self._jobs) - set(wanted):
                aps.remove_job(str(job_id))
                del self._jobs[job_id]
            now = self._clock()
            for job_id, loaded in wanted.items():
                known = self._jobs.get(job_id)
                if known is not None and _definition(known.record) == _definition(loaded.record):
                    continue
                next_run = loaded.trigger.get_next_fire_time(None, now)
                options: dict[str, Any] = {}
                if at_startup and missed_while_down(loaded.record, loaded.trigger, now):
                    log.info("cron job %s (%s) missed a run while down; running it once now", job_id, loaded.record.name)
                    next_run = now
                    options["next_run_time"] = datetime.now(timezone.utc)
                aps.add_job(
                    self._fire, loaded.trigger, args=(job_id,), id=str(job_id),
                    name=f"{loaded.record.name}#{job_id}", replace_existing=True, **options,
                )
                self._jobs[job_id] = loaded
                await self._repos.cron_jobs.set_next_run(job_id, _iso(next_run))
            self._fingerprint = fingerprint

    async def _fire(self, job_id: int) -> None:
        loaded = self._jobs.get(job_id)
        if loaded is None:
            return
        job = loaded.record
        task = asyncio.current_task()
        if task is not None:
            self._running.add(task)
        started = self._clock()
        try:
            if job.task_type == "emergence":
                await self._runner.run_emergence_job(job)
            else:
                await self._runner.run_text_job(job)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            log.info("cron job %s (%s) cancelled by shutdown; it runs again at start-up", job_id, job.name)
            return
        except Exception:
            # One broken job must not stop the others: log it and record the run anyway,
            # so a failing job is not retried at every restart.
            log.exception("cron job %s (%s) failed", job_id, job.name)
        finally:
            if task is not None:
                self._running.discard(task)
        next_run = loaded.trigger.get_next_fire_time(None, self._clock())
        try:
            await self._repos.cron_jobs.mark_run(job_id, _iso(started) or "", _iso(next_run))
        except Exception:
            log.exception("recording the run of cron job %s failed", job_id)
