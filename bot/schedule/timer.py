"""TaskTimer: the one timer of scheduled tasks, reminders and each agent's system tasks (the nightly
consolidation). It runs each task once at its time and catches up after downtime by one rule: the
latest run missed in a row runs once, if it is not later than its kind allows (a reminder:
`catch-up-minutes`, then it is marked missed and its chat hears of it; a system task: always).
Reminders whose maker lost the access or route they were made with are cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Protocol

from bot.core.clock import Clock, iso, parse_iso, utc_now
from bot.core.lifecycle import AsyncResource
from bot.storage.tasks import ChatRef
from bot.storage.tasks import TaskRepository, TaskRecord
from bot.schedule.reminders.delivery import MaySchedule
from bot.schedule.reminders.service import TaskService
from bot.schedule.timing import latest_due, next_fire, parse_cron, parse_at

log = logging.getLogger(__name__)

MAX_SLEEP = 30.0  # the clock is read again at least this often (a suspended host, a changed clock)
STOP_GRACE = 5.0


SystemRun = Callable[[TaskRecord], Awaitable[None]]  # runs one system task (SystemTaskRunner)


class FireTask(Protocol):
    """Delivers one reminder's run; False when it could not start (the daemon is stopping)."""

    async def __call__(self, task: TaskRecord) -> bool: ...

    async def lost_standing(self, task: TaskRecord, may_schedule: MaySchedule) -> str | None:
        """Why the task's maker no longer has the access or route it was made with; None: it has."""
        ...


class TaskTimer(AsyncResource):
    """Wakes at the next due task; records each run before delivering it, so a crash between the
    two delivers at most once.

    The clock is injected and read each time: APScheduler 3 reads the wall clock itself, so
    its triggers only compute the times here (cron fields, DST), and the waiting is ours.
    """

    def __init__(
        self, store: TaskRepository, service: TaskService, fire: FireTask, *, catch_up_minutes: float,
        system: SystemRun | None = None, timezone: str = "UTC", clock: Clock = utc_now,
        max_sleep: float = MAX_SLEEP, stop_grace: float = STOP_GRACE,
    ) -> None:
        self._store = store
        self._service = service
        self._fire = fire
        self._system = system  # None: system tasks wait (a daemon without memory has none to run)
        self._catch_up = timedelta(minutes=catch_up_minutes)
        self._timezone = timezone  # for a system task whose row names no zone
        self._clock = clock
        self._max_sleep = max_sleep
        self._stop_grace = stop_grace
        self._loop: asyncio.Task[None] | None = None
        self._firing: set[asyncio.Task[None]] = set()
        self._held: dict[int, datetime] = {}  # task id -> when its failed check is tried again
        # Tasks whose unreadable schedule was already logged, with that schedule: a fix is seen.
        self._skipped: set[tuple[int, str, str]] = set()
        self._running: set[int] = set()  # system tasks whose run has not ended: never two at once

    @property
    def runs_system_tasks(self) -> bool:
        return self._system is not None

    async def open(self) -> None:
        await self._service.load_missed()
        await self.vet_pending()
        if self.runs_system_tasks:
            await self._redo_unfinished()
        self._loop = asyncio.create_task(self._run(), name="task-timer")

    async def _redo_unfinished(self) -> None:
        """A system task's run is recorded when it ends (a reminder's before it starts): one whose
        run was claimed but never ended (the daemon was killed) has a fire between its last run
        and its next one. It is made due again, so the night's consolidation is not lost."""
        for task in await self._store.system_tasks():
            if not task.enabled or task.next_run_time is None or not task.cron:
                continue
            try:
                seen = [parse_iso(t) for t in (task.last_run_time, task.create_time) if t]
                trigger = parse_cron(task.cron, task.timezone or self._timezone)
                first = next_fire(trigger, max(seen)) if seen else None
                scheduled = parse_iso(task.next_run_time)
            except (ValueError, KeyError):
                continue  # an unreadable row is skipped when it is due
            if first is not None and first < scheduled:
                await self._store.release(task.id, iso(first), task.next_run_time, task.last_run_time)
                log.info("task %s (%s) did not finish its last run; it runs again now", task.id, task.name)

    async def close(self) -> None:
        """No new runs; runs in progress get a few seconds, then are cancelled (recorded already:
        start-up recovery answers a turn left without its reply)."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
        if self._firing:
            _, pending = await asyncio.wait(self._firing, timeout=self._stop_grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                await self.run_due()
                delay = await self._delay()
            except Exception:  # boundary: a broken row or a locked database must not end the timer
                log.exception("running due tasks failed; trying again in %.0f s", self._max_sleep)
                delay = self._max_sleep
            await self._service.changes.wait(delay)

    async def _delay(self) -> float:
        upcoming = await self._store.next_due(system=self.runs_system_tasks)
        if upcoming is None:
            return self._max_sleep
        now = self._clock()
        try:
            at = parse_iso(upcoming)
            if at <= now and self._held:
                at = await self._next_unheld(now)
        except ValueError:
            return self._max_sleep
        return min(max((at - now).total_seconds(), 0.01), self._max_sleep)

    async def _next_unheld(self, now: datetime) -> datetime:
        """When the next task that is not held back is due, or a hold ends: what is due now is
        held, and waking for it every few milliseconds would only skip it again."""
        horizon = now + timedelta(seconds=self._max_sleep)
        times = [parse_iso(t.next_run_time) for t in await self._store.due(iso(horizon), system=self.runs_system_tasks)
                 if t.next_run_time is not None and t.id not in self._held]
        return min([*times, *self._held.values(), horizon])

    async def run_due(self) -> int:
        """Start every task due now (each in its own task); how many were started. A task whose
        check fails is skipped, not run, and tried again after `max_sleep`: the others go on."""
        now = self._clock()
        await self._schedule_new()
        self._held = {task_id: until for task_id, until in self._held.items() if until > now}
        started = 0
        for task in await self._store.due(iso(now), system=self.runs_system_tasks):
            if task.id in self._held:
                continue
            try:
                if await self._take(task, now):
                    started += 1
            except Exception as exc:  # boundary: fail closed for this task, not for every one due after it
                self._held[task.id] = now + timedelta(seconds=self._max_sleep)
                log.warning("task %s not run: checking or recording its run failed (%s: %s); tried again in %.0f s",
                            task.id, type(exc).__name__, exc, self._max_sleep)
        return started

    async def _schedule_new(self) -> None:
        """Give each new task its first run: the first fire after it last ran, or after it was made
        if it never ran. A fire that passed meanwhile is due now, so a task added or left unscheduled
        while the daemon was down is caught up once, not for the days before it existed."""
        for task in await self._store.unscheduled(system=self.runs_system_tasks):
            try:
                first = self._first_run(task)
            except (ValueError, KeyError) as exc:
                self._skip(task, exc)
                continue
            if first is not None:
                await self._store.set_next_run(task.id, iso(first))

    def _skip(self, task: TaskRecord, problem: Exception) -> None:
        """Log once that a task's schedule cannot be read (again when it changes)."""
        key = (task.id, task.cron, task.timezone)
        if key not in self._skipped:
            self._skipped.add(key)
            log.warning("task %s (%s) skipped: %r: %s", task.id, task.name, task.cron, problem)

    def _first_run(self, task: TaskRecord) -> datetime | None:
        if not task.cron:
            return parse_at(task.run_at, task.timezone or self._timezone) if task.run_at else None
        seen = [parse_iso(t) for t in (task.last_run_time, task.create_time) if t]
        trigger = parse_cron(task.cron, task.timezone or self._timezone)
        return next_fire(trigger, max(seen) if seen else self._clock())

    async def vet_pending(self) -> int:
        """Cancel the pending tasks whose makers lost the access or route they had (the config
        may have changed while the daemon was down); how many were cancelled. Their runs are
        checked again when due: a check that fails here leaves them to that one."""
        checked: set[tuple[ChatRef, str, int]] = set()
        cancelled = 0
        for task in await self._store.for_agent(None):
            key = (task.chat, task.created_by, task.agent_id)
            if key in checked:
                continue
            checked.add(key)
            try:
                cancelled += await self._cancel_if_lost(task)
            except Exception:  # boundary: the daemon starts; the run itself is checked again
                log.warning("checking task %s against today's access rules failed", task.id, exc_info=True)
        return cancelled

    async def _cancel_if_lost(self, task: TaskRecord) -> int:
        """Cancel, with one log line, every live task of this maker in this chat for this agent when
        the maker lost its standing; how many were cancelled (0: the task may run)."""
        reason = await self._fire.lost_standing(task, self._service.may_schedule)
        if reason is None:
            return 0
        chat = task.chat
        count = await self._store.cancel_made_by(chat, task.created_by, task.agent_id)
        if count:
            log.warning("%d pending reminder(s) cancelled: %s", count, reason,
                        extra={"channel": chat.channel, "chat_id": chat.chat_id, "thread_id": chat.thread_id})
        return max(count, 1)  # cancelled here, or meanwhile by another run: it does not run either way

    async def _take(self, task: TaskRecord, now: datetime) -> bool:
        assert task.next_run_time is not None
        try:
            due = parse_iso(task.next_run_time)
            trigger = parse_cron(task.cron, task.timezone or self._timezone) if task.cron else None
        except (ValueError, KeyError) as exc:
            if not task.is_reminder:  # the owner's hand edit: skipped until it reads again
                self._skip(task, exc)
                return False
            log.warning("task %s disabled: %s", task.id, exc)  # a reminder is stopped, not retried forever
            await self._store.miss(task.id, task.next_run_time, None)
            return False
        if task.id in self._running:  # still at its last run: this one folds into it
            return False
        # Checked before anything is recorded or said in the chat, a missed-run notice included.
        if task.is_reminder and await self._cancel_if_lost(task):
            return False
        following: datetime | None = None
        if trigger is not None:
            due = latest_due(trigger, due, now)  # one catch-up covers every run missed in a row
            following = next_fire(trigger, now)
        next_text = iso(following) if following is not None else None
        late = now - due
        if task.is_reminder and late > self._catch_up:
            if await self._store.miss(task.id, task.next_run_time, next_text):
                self._service.note_missed(task)
                log.info("task %s missed its run of %s (%.0f min late); its chat hears of it once",
                         task.id, iso(due), late.total_seconds() / 60)
            return False
        # A reminder is recorded as run before it is sent (at most once); a system task when its
        # run ends (at least once: a run cut by a crash is made again at the next start).
        ran = iso(now) if task.is_reminder else task.last_run_time
        if not await self._store.claim(task.id, task.next_run_time, next_text, ran=ran):
            return False  # cancelled or taken meanwhile
        if not task.is_reminder:
            self._running.add(task.id)
        if late > timedelta(minutes=1):
            log.info("task %s runs %.0f min late (missed while down)", task.id, late.total_seconds() / 60)
        running = asyncio.create_task(self._deliver(task, next_text), name=f"task-{task.id}")
        self._firing.add(running)
        running.add_done_callback(self._firing.discard)
        return True

    async def _deliver(self, task: TaskRecord, claimed_next: str | None) -> None:
        assert task.next_run_time is not None
        if not task.is_reminder:
            try:
                await self._run_system(task, claimed_next)
            finally:
                self._running.discard(task.id)
            return
        try:
            started = await self._fire(task)
        except Exception:  # boundary: one task's failure must not touch the others; its run stays recorded
            log.exception("task %s failed", task.id)
            return
        if not started:  # a reminder's cut turn is stored instead: start-up recovery answers it
            await self._put_back(task, claimed_next)

    async def _run_system(self, task: TaskRecord, claimed_next: str | None) -> None:
        assert self._system is not None
        started = iso(self._clock())
        try:
            await self._system(task)
        except asyncio.CancelledError:  # a stop: the next start runs it whole
            await self._put_back(task, claimed_next)
            raise
        except Exception:  # boundary: recorded as run all the same, so a broken task is not redone at each start
            log.exception("task %s (%s) failed", task.id, task.name)
        await self._store.ran(task.id, started)

    async def _put_back(self, task: TaskRecord, claimed_next: str | None) -> None:
        assert task.next_run_time is not None
        await self._store.release(task.id, task.next_run_time, claimed_next, task.last_run_time)
        log.info("task %s put back: the daemon is stopping; it runs at the next start", task.id)
