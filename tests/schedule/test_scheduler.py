"""System tasks (the nightly consolidation) on the one timer of scheduled tasks, over real SQLite
and a clock the test moves (SPEC S8, S35)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from bot.app.core import Core, open_core
from bot.core.clock import iso, parse_iso
from bot.schedule.reminders.service import TaskService
from bot.schedule.timer import TaskTimer
from bot.schedule.timing import next_fire, parse_cron
from bot.storage.tasks import TaskRecord
from tests.support.config import make_config
from tests.support.clock import SteppedClock
from tests.support.eventually import eventually

AGENT = 1
START = datetime(2026, 4, 1, 12, 0, 30, tzinfo=timezone.utc)  # a Wednesday


class RecordingRunner:
    """Records each system task it is asked to run; raises for the task names in `failing`."""

    def __init__(self, failing: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[str, int]] = []
        self.failing = failing

    async def __call__(self, task: TaskRecord) -> None:
        self.calls.append((task.kind, task.id))
        if task.name in self.failing:
            raise RuntimeError(f"{task.name} is broken")


class NoReminders:
    """Reminders are not what these tests are about: none exist, so none is ever delivered."""

    async def __call__(self, task: TaskRecord) -> bool:
        raise AssertionError("no reminder was made")

    async def lost_standing(self, task: TaskRecord, may_schedule: object) -> str | None:
        return None


@dataclass
class Env:
    core: Core
    clock: SteppedClock

    async def add(self, name: str, cron: str = "* * * * *", kind: str = "text", zone: str = "UTC") -> int:
        return await self.core.repos.tasks.add_system(AGENT, name, cron, zone, kind, f"{name} trigger")

    async def task(self, task_id: int) -> TaskRecord:
        return next(t for t in await self.core.repos.tasks.system_tasks() if t.id == task_id)

    @asynccontextmanager
    async def timer(self, runner: RecordingRunner, **options: float) -> AsyncIterator[TaskTimer]:
        config = self.core.config.mate
        service = TaskService(config.tasks, "UTC", self.core.repos.tasks, self.core.access, self.core.prompts,
                              clock=self.clock)
        async with TaskTimer(self.core.repos.tasks, service, NoReminders(), catch_up_minutes=120, system=runner,
                             clock=self.clock, max_sleep=options.get("max_sleep", 0.05),
                             stop_grace=options.get("stop_grace", 5.0)) as timer:
            yield timer

    async def at(self, moment: datetime, timer: TaskTimer) -> None:
        self.clock.set(moment)
        await timer.run_due()


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    clock = SteppedClock(START)
    async with open_core(make_config(tmp_path), clock=clock) as core:
        await core.db.execute("DELETE FROM mate_cron_job")  # the seeded nightly task: each test adds its own
        yield Env(core, clock)


async def test_a_text_task_runs_at_its_time_and_records_the_run(env: Env) -> None:
    task_id = await env.add("nightly")
    runner = RecordingRunner()
    async with env.timer(runner) as timer:
        await eventually(lambda: _scheduled(env, task_id), "the new task gets its first run")
        stored = await env.task(task_id)
        assert stored.next_run_time == iso(START.replace(second=0) + timedelta(minutes=1))
        await timer.run_due()
        assert runner.calls == []  # created just now: nothing was missed
        await env.at(parse_iso(stored.next_run_time or ""), timer)
        await eventually(lambda: runner.calls == [("text", task_id)])
        stored = await env.task(task_id)
    assert stored.last_run_time is not None and stored.next_run_time is not None
    assert stored.next_run_time > stored.last_run_time


async def test_an_emergence_task_reaches_the_runner_as_emergence(env: Env) -> None:
    task_id = await env.add("consolidate", "0 2 * * *", kind="emergence")
    runner = RecordingRunner()
    async with env.timer(runner) as timer:
        await env.at(START + timedelta(days=1), timer)
        await eventually(lambda: runner.calls == [("emergence", task_id)])


async def test_a_run_missed_while_down_runs_once_at_start_up(env: Env) -> None:
    missed = await env.add("missed", "0 2 * * *")
    ran_today = await env.add("ran-today", "0 2 * * *")
    later = START + timedelta(days=3)  # three 02:00 fires passed since creation
    await env.core.db.execute("UPDATE mate_cron_job SET last_run_time = ? WHERE id = ?", (iso(later), ran_today))
    runner = RecordingRunner()
    env.clock.set(later)
    async with env.timer(runner):
        await eventually(lambda: len(runner.calls) == 1)
        await eventually(lambda: _ran(env, missed), "the catch-up is recorded")
        stored = await env.task(missed)
        assert runner.calls == [("text", missed)]
    assert stored.last_run_time == iso(later)
    assert stored.next_run_time is not None and stored.next_run_time > stored.last_run_time

    env.clock.set(later + timedelta(minutes=5))
    async with env.timer(runner) as timer:
        await timer.run_due()
    assert runner.calls == [("text", missed)]  # the catch-up is recorded: a restart does not repeat it


async def test_a_task_added_while_running_is_picked_up(env: Env) -> None:
    runner = RecordingRunner()
    async with env.timer(runner) as timer:
        added = await env.add("added", kind="emergence")
        await eventually(lambda: _scheduled(env, added), "the running timer schedules the new task")
        await env.at(START + timedelta(minutes=2), timer)
        await eventually(lambda: runner.calls == [("emergence", added)])


async def test_a_failing_task_does_not_stop_the_others(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    broken = await env.add("broken")
    healthy = await env.add("healthy")
    runner = RecordingRunner(failing=("broken",))
    with caplog.at_level(logging.ERROR, logger="bot.schedule.timer"):
        async with env.timer(runner) as timer:
            await env.at(START + timedelta(minutes=1), timer)
            await eventually(lambda: {("text", broken), ("text", healthy)} <= set(runner.calls))
            await env.at(START + timedelta(minutes=2), timer)
            await eventually(lambda: runner.calls.count(("text", broken)) == 2)
            await eventually(lambda: _ran(env, broken), "the failed run is recorded, not retried at each start")
    assert any("broken" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_tasks_with_an_unreadable_schedule_are_skipped(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    bad = await env.add("bad", "every day at two")
    bad_zone = await env.add("bad-zone", "0 2 * * *", zone="Mars/Olympus")
    good = await env.add("good")
    with caplog.at_level(logging.WARNING, logger="bot.schedule.timer"):
        async with env.timer(RecordingRunner()) as timer:
            await timer.run_due()
            await timer.run_due()
            scheduled = {t.id for t in await env.core.repos.tasks.system_tasks() if t.next_run_time}
    assert scheduled == {good}
    skipped = [r.getMessage() for r in caplog.records]
    assert sum(f"task {bad} (bad) skipped" in m for m in skipped) == 1  # said once, not at every pass
    assert sum(f"task {bad_zone} (bad-zone) skipped" in m for m in skipped) == 1


@pytest.mark.parametrize(
    ("expression", "weekdays"),
    [
        ("0 2 * * 0", {6}),  # crontab Sunday; APScheduler's own 0 would be Monday
        ("0 2 * * 7", {6}),
        ("0 2 * * 1-5", {0, 1, 2, 3, 4}),
        ("0 2 * * 5-7", {4, 5, 6}),
        ("0 2 * * */2", {6, 1, 3, 5}),
        ("0 2 * * sat,sun", {5, 6}),
        ("0 2 * * *", set(range(7))),
    ],
)
def test_crontab_weekdays_follow_cron_not_apscheduler(expression: str, weekdays: set[int]) -> None:
    trigger = parse_cron(expression, "UTC")
    moment = datetime(2026, 4, 1, tzinfo=timezone.utc)
    seen: set[int] = set()
    for _ in range(14):
        fire = trigger.get_next_fire_time(None, moment)
        assert fire is not None and (fire.hour, fire.minute) == (2, 0)
        seen.add(fire.weekday())
        moment = fire + timedelta(seconds=1)
    assert seen == weekdays


def test_local_and_named_zones() -> None:
    assert parse_cron("0 2 * * *", "local").get_next_fire_time(None, datetime(2026, 4, 1, tzinfo=timezone.utc))
    fire = parse_cron("0 2 * * *", "Asia/Shanghai").get_next_fire_time(None, datetime(2026, 4, 1, tzinfo=timezone.utc))
    assert fire is not None and fire.astimezone(timezone.utc).hour == 18
    with pytest.raises(ValueError):
        parse_cron("0 2 * *", "UTC")


class BlockingRunner(RecordingRunner):
    """Starts a run and never finishes it, like an LLM call still in flight at shutdown."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = False

    async def __call__(self, task: TaskRecord) -> None:
        await super().__call__(task)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def test_a_stop_cancels_a_run_in_progress_and_puts_it_back(env: Env) -> None:
    task_id = await env.add("slow")
    runner = BlockingRunner()
    async with env.timer(runner, stop_grace=0.05) as timer:
        await env.at(START + timedelta(minutes=1), timer)
        await eventually(lambda: runner.calls == [("text", task_id)])
    assert runner.cancelled
    stored = await env.task(task_id)
    assert stored.last_run_time is None  # so the next start-up runs it again
    assert stored.next_run_time == iso(START.replace(second=0) + timedelta(minutes=1))


async def _scheduled(env: Env, task_id: int) -> bool:
    return (await env.task(task_id)).next_run_time is not None


async def _ran(env: Env, task_id: int) -> bool:
    return (await env.task(task_id)).last_run_time is not None


async def test_a_run_cut_by_a_crash_is_made_again_at_the_next_start(env: Env) -> None:
    task_id = await env.add("nightly", "0 2 * * *")
    runner = RecordingRunner()
    async with env.timer(runner):  # scheduled for tomorrow 02:00
        await eventually(lambda: _scheduled(env, task_id), "the first run is scheduled")
    stored = await env.task(task_id)
    due = stored.next_run_time or ""
    # The timer claimed the run at 02:00 and the process died before it ended: the row says
    # when the next run is, but not that this one ran.
    env.clock.set(parse_iso(due) + timedelta(minutes=3))
    assert await env.core.repos.tasks.claim(task_id, due, iso(parse_iso(due) + timedelta(days=1)), ran=None)
    async with env.timer(runner):
        await eventually(lambda: runner.calls == [("text", task_id)], "the cut run made again")
        await eventually(lambda: _ran(env, task_id), "the run recorded when it ended")
    assert (await env.task(task_id)).next_run_time == iso(parse_iso(due) + timedelta(days=1))


async def test_a_system_task_still_running_is_not_started_again(env: Env) -> None:
    task_id = await env.add("slow", "* * * * *")
    runner = BlockingRunner()
    async with env.timer(runner, stop_grace=0.05) as timer:
        await env.at(START + timedelta(minutes=1), timer)
        await eventually(lambda: runner.calls == [("text", task_id)])
        await env.at(START + timedelta(minutes=3), timer)  # due again while the first run goes on
        await timer.run_due()
        assert runner.calls == [("text", task_id)]


async def test_a_system_task_whose_schedule_breaks_is_skipped_and_runs_once_fixed(
    env: Env, caplog: pytest.LogCaptureFixture,
) -> None:
    task_id = await env.add("nightly")
    runner = RecordingRunner()
    with caplog.at_level(logging.WARNING, logger="bot.schedule.timer"):
        async with env.timer(runner) as timer:
            await eventually(lambda: _scheduled(env, task_id), "the first run is scheduled")
            await env.core.db.execute("UPDATE mate_cron_job SET timezone = 'Mars/Olympus' WHERE id = ?", (task_id,))
            await env.at(START + timedelta(minutes=1), timer)
            await timer.run_due()
            assert runner.calls == [] and (await env.task(task_id)).enabled  # skipped, not switched off
            await env.core.db.execute("UPDATE mate_cron_job SET timezone = 'UTC' WHERE id = ?", (task_id,))
            await timer.run_due()
            await eventually(lambda: runner.calls == [("text", task_id)], "the fixed task runs")
    assert sum(f"task {task_id} (nightly) skipped" in r.getMessage() for r in caplog.records) == 1


def test_a_fixed_hour_runs_once_when_the_clocks_go_back_and_every_quarter_hour_runs_through_both() -> None:
    # Europe/Berlin, 2026-10-25: 02:00-03:00 local comes twice (00:00-01:00 UTC in summer time, 01:00-02:00 in winter).
    nightly = parse_cron("0 2 * * *", "Europe/Berlin")
    first = next_fire(nightly, datetime(2026, 10, 24, 23, 59, tzinfo=timezone.utc))
    assert first == datetime(2026, 10, 25, 0, 0, tzinfo=timezone.utc)
    assert next_fire(nightly, first) == datetime(2026, 10, 26, 1, 0, tzinfo=timezone.utc)  # not 01:00 UTC that night
    quarter = parse_cron("*/15 * * * *", "Europe/Berlin")
    fires, moment = [], datetime(2026, 10, 24, 23, 50, tzinfo=timezone.utc)
    while moment < datetime(2026, 10, 25, 2, 0, tzinfo=timezone.utc):
        moment = next_fire(quarter, moment) or moment
        fires.append(moment)
    assert len(fires) == 9  # 00:00 to 02:00 UTC, both passes through the repeated hour
