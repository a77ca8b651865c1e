"""CronScheduler over real SQLite and a real AsyncIOScheduler (SPEC S8)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.support.eventually import eventually

from bot.schedule.scheduler import CronScheduler, parse_cron
from bot.storage import Database, Repositories
from bot.core.records import CronJobRecord

AGENT = 1


class RecordingRunner:
    """Records each job it is asked to run; raises for the job names in `failing`."""

    def __init__(self, failing: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[str, int]] = []
        self.failing = failing

    async def run_text_job(self, job: CronJobRecord) -> None:
        self._record("text", job)

    async def run_emergence_job(self, job: CronJobRecord) -> None:
        self._record("emergence", job)

    def _record(self, kind: str, job: CronJobRecord) -> None:
        self.calls.append((kind, job.id))
        if job.name in self.failing:
            raise RuntimeError(f"{job.name} is broken")


@pytest.fixture
async def repos(tmp_path: Path) -> AsyncIterator[Repositories]:
    async with Database(tmp_path / "mate.db") as db:
        opened = Repositories.over(db)
        await opened.agents.ensure(AGENT, "Mate")
        yield opened


async def add_job(repos: Repositories, name: str, cron: str = "* * * * *", task_type: str = "text") -> int:
    return await repos.cron_jobs.add(AGENT, name, cron, "UTC", task_type, f"{name} trigger")


async def job(repos: Repositories, job_id: int) -> CronJobRecord:
    return next(j for j in await repos.cron_jobs.list() if j.id == job_id)


async def recorded_run(repos: Repositories, job_id: int) -> CronJobRecord:
    """The job's row once mark_run has stored its last_run_time."""
    for _ in range(200):
        stored = await job(repos, job_id)
        if stored.last_run_time:
            return stored
        await asyncio.sleep(0.01)
    raise AssertionError(f"job {job_id} was never marked run")


async def test_text_job_fires_and_records_the_run(repos: Repositories) -> None:
    job_id = await add_job(repos, "nightly")
    runner = RecordingRunner()
    async with CronScheduler(repos, runner, timezone="UTC") as scheduler:
        assert job_id in scheduler.next_run_times()
        assert (await job(repos, job_id)).next_run_time is not None
        await asyncio.sleep(0.05)
        assert runner.calls == []  # created just now: nothing was missed
        assert scheduler.run_now(job_id)
        await eventually(lambda: runner.calls == [("text", job_id)])
        stored = await recorded_run(repos, job_id)
    assert stored.last_run_time is not None and stored.next_run_time is not None
    assert stored.next_run_time > stored.last_run_time


async def test_emergence_job_reaches_the_emergence_runner(repos: Repositories) -> None:
    job_id = await add_job(repos, "consolidate", "0 2 * * *", task_type="emergence")
    runner = RecordingRunner()
    async with CronScheduler(repos, runner, timezone="UTC") as scheduler:
        scheduler.run_now(job_id)
        await eventually(lambda: runner.calls == [("emergence", job_id)])


async def test_run_missed_while_down_runs_once_at_start_up(repos: Repositories) -> None:
    missed = await add_job(repos, "missed", "0 2 * * *")
    ran_today = await add_job(repos, "ran-today", "0 2 * * *")
    later = datetime.now(timezone.utc) + timedelta(days=3)  # three 02:00 fires passed since creation
    await repos.cron_jobs.mark_run(ran_today, later.isoformat(), None)
    runner = RecordingRunner()

    async with CronScheduler(repos, runner, timezone="UTC", clock=lambda: later):
        await eventually(lambda: len(runner.calls) == 1)
        stored = await recorded_run(repos, missed)
        await asyncio.sleep(0.1)
        assert runner.calls == [("text", missed)]
    assert stored.last_run_time == later.isoformat(timespec="milliseconds")
    assert stored.next_run_time is not None and stored.next_run_time > stored.last_run_time

    async with CronScheduler(repos, runner, timezone="UTC", clock=lambda: later + timedelta(minutes=5)):
        await asyncio.sleep(0.1)
    assert runner.calls == [("text", missed)]  # the catch-up is recorded: a restart does not repeat it


async def test_reload_picks_up_a_new_job(repos: Repositories) -> None:
    runner = RecordingRunner()
    async with CronScheduler(repos, runner, timezone="UTC", reload_interval=0.05) as scheduler:
        assert scheduler.next_run_times() == {}
        polled = await add_job(repos, "polled")
        await eventually(lambda: polled in scheduler.next_run_times())
        explicit = await add_job(repos, "explicit", task_type="emergence")
        await scheduler.reload()
        assert explicit in scheduler.next_run_times()
        scheduler.run_now(explicit)
        await eventually(lambda: runner.calls == [("emergence", explicit)])


async def test_failing_job_does_not_stop_the_others(repos: Repositories, caplog: pytest.LogCaptureFixture) -> None:
    broken = await add_job(repos, "broken")
    healthy = await add_job(repos, "healthy")
    runner = RecordingRunner(failing=("broken",))
    with caplog.at_level(logging.ERROR, logger="bot.schedule.scheduler"):
        async with CronScheduler(repos, runner, timezone="UTC") as scheduler:
            scheduler.run_now(broken)
            await eventually(lambda: ("text", broken) in runner.calls)
            scheduler.run_now(healthy)
            await eventually(lambda: ("text", healthy) in runner.calls)
            await eventually(lambda: broken in scheduler.next_run_times())
            scheduler.run_now(broken)
            await eventually(lambda: runner.calls.count(("text", broken)) == 2)
            await recorded_run(repos, broken)
    assert any("broken" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_invalid_cron_rows_are_skipped(repos: Repositories, caplog: pytest.LogCaptureFixture) -> None:
    bad = await add_job(repos, "bad", "every day at two")
    bad_zone = await repos.cron_jobs.add(AGENT, "bad-zone", "0 2 * * *", "Mars/Olympus", "text", "x")
    good = await add_job(repos, "good")
    with caplog.at_level(logging.WARNING, logger="bot.schedule.scheduler"):
        async with CronScheduler(repos, RecordingRunner(), timezone="UTC") as scheduler:
            assert set(scheduler.next_run_times()) == {good}
    skipped = " ".join(r.getMessage() for r in caplog.records)
    assert f"cron job {bad} (bad) skipped" in skipped and f"cron job {bad_zone} (bad-zone) skipped" in skipped


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
    assert parse_cron("0 2 * * *", "local").get_next_fire_time(None, datetime.now(timezone.utc)) is not None
    fire = parse_cron("0 2 * * *", "Asia/Shanghai").get_next_fire_time(None, datetime(2026, 4, 1, tzinfo=timezone.utc))
    assert fire is not None and fire.astimezone(timezone.utc).hour == 18
    with pytest.raises(ValueError):
        parse_cron("0 2 * *", "UTC")


class BlockingRunner(RecordingRunner):
    """Starts a run and never finishes it, like an LLM call still in flight at shutdown."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = False

    async def run_text_job(self, job: CronJobRecord) -> None:
        self._record("text", job)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def test_shutdown_cancels_a_run_in_progress_without_marking_it(repos: Repositories) -> None:
    job_id = await add_job(repos, "slow")
    runner = BlockingRunner()
    async with CronScheduler(repos, runner, timezone="UTC") as scheduler:
        scheduler.run_now(job_id)
        await eventually(lambda: runner.calls == [("text", job_id)])
    assert runner.cancelled
    assert (await job(repos, job_id)).last_run_time is None  # so the next start-up catches it up
