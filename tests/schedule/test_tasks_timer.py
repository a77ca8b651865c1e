"""The reminders' timer on a clock the test moves: DST in Europe/Berlin, and a daemon that was down
across a task's time (caught up once within the window, mentioned once when later) (SPEC S27)."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from bot.core.clock import iso
from bot.app.runtime import open_runtime
from bot.storage.tasks import ChatRef, TaskRecord
from bot.schedule.reminders.service import Sender, TaskService
from bot.schedule.reminders.tool import SCHEDULE_TOOL, ChatTaskTools
from channels.base import InboundMessage
from tests.support.config import make_config
from tests.support.fakes.anthropic import ErrorReply
from tests.support.fakes.telegram import FakeTelegram
from tests.support.clock import SteppedClock
from tests.support.tasks_env import OWNER, SCHEDULED_MARK, World, utc, world

BERLIN = "Europe/Berlin"
OWNER_CHAT = ChatRef("telegram", str(OWNER))


def service_at(w: World, clock: SteppedClock) -> TaskService:
    """The runtime's task rules, reading the test's clock (the tools read the real one)."""
    mate = w.rt.core.config.mate
    return TaskService(mate.tasks, mate.timezone, w.rt.core.repos.tasks, w.rt.access, w.rt.core.prompts, clock=clock)


async def fires_at(w: World, clock: SteppedClock, moment: datetime, count: int) -> None:
    """Move the clock to just before `moment` (nothing new arrives), then to it (reminder `count` arrives)."""
    clock.set(moment - timedelta(seconds=1))
    await w.timer.run_due()
    assert len(w.sent_to(OWNER)) == count - 1, (moment, w.sent_to(OWNER))
    clock.set(moment)
    await w.until(lambda: len(w.sent_to(OWNER)) >= count, f"the reminder at {moment}")


async def test_a_daily_nine_oclock_task_stays_at_nine_across_both_dst_changes(tmp_path: Path) -> None:
    clock = SteppedClock(utc(2026, 3, 28, 6, 0))  # Saturday, 07:00 in Berlin (CET, +01:00)
    async with world(tmp_path, clock=clock, timezone=BERLIN) as w:
        task = await service_at(w, clock).schedule(OWNER_CHAT, Sender(str(OWNER), "Olga"), 1, "take the pill",
                                                   cron="0 9 * * *")
        assert w.rt.tasks.next_run_text(task) == "2026-03-28T09:00:00+01:00"

        await fires_at(w, clock, utc(2026, 3, 28, 8, 0), 1)  # 09:00 CET
        stored = await w.rt.core.repos.tasks.get(task.id)
        assert stored is not None and stored.next_run_time == iso(utc(2026, 3, 29, 7, 0))  # 09:00 CEST
        await fires_at(w, clock, utc(2026, 3, 29, 7, 0), 2)  # the clocks went forward at 02:00
        await fires_at(w, clock, utc(2026, 3, 30, 7, 0), 3)

        clock.set(utc(2026, 10, 24, 6, 0))  # autumn: a long time later, on the same task
        await service_at(w, clock).cancel_in_chat(OWNER_CHAT, task.id)
        autumn = await service_at(w, clock).schedule(OWNER_CHAT, Sender(str(OWNER), "Olga"), 1, "take the pill",
                                                     cron="0 9 * * *")
        await fires_at(w, clock, utc(2026, 10, 24, 7, 0), 4)  # 09:00 CEST
        await fires_at(w, clock, utc(2026, 10, 25, 8, 0), 5)  # 09:00 CET: the clocks went back at 03:00
        stored = await w.rt.core.repos.tasks.get(autumn.id)
        assert stored is not None and w.rt.tasks.next_run_text(stored) == "2026-10-26T09:00:00+01:00"
        assert len(w.reminder_turns()) == 5


async def test_a_reminder_missed_while_down_runs_once_within_the_catch_up_window(tmp_path: Path) -> None:
    clock = SteppedClock(utc(2026, 5, 4, 8, 0))
    async with world(tmp_path, clock=clock) as w:
        await service_at(w, clock).schedule(OWNER_CHAT, Sender(str(OWNER), "Olga"), 1, "call mum",
                                            at="2026-05-06T09:00:00")
        daily = await service_at(w, clock).schedule(OWNER_CHAT, Sender(str(OWNER), "Olga"), 1, "stretch",
                                                    cron="30 8 * * *")
        clock.set(utc(2026, 5, 4, 8, 29))  # the daemon stops here, before either ran
    clock.set(utc(2026, 5, 6, 9, 40))  # two days later: 09:00 was 40 min ago, today's 08:30 70 min ago
    async with world(tmp_path, clock=clock) as w:
        await w.until(lambda: len(w.sent_to(OWNER)) >= 2, "the two catch-up runs")
        assert len(w.reminder_turns()) == 2  # the daily task once, for all its missed days
        assert {("call mum" in str(t.body["messages"][-1]["content"])) for t in w.reminder_turns()} == {True, False}
        stored = await w.rt.core.repos.tasks.get(daily.id)
        assert stored is not None and stored.next_run_time == iso(utc(2026, 5, 7, 8, 30))
    async with world(tmp_path, clock=clock) as w:  # and a restart after that runs nothing again
        assert await w.timer.run_due() == 0
        assert w.sent_to(OWNER) == []


async def test_a_reminder_later_than_the_window_is_mentioned_once_in_the_next_reply(tmp_path: Path) -> None:
    clock = SteppedClock(utc(2026, 5, 4, 8, 0))
    async with world(tmp_path, clock=clock, tasks={"catch-up-minutes": 60}) as w:
        task = await service_at(w, clock).schedule(OWNER_CHAT, Sender(str(OWNER), "Olga"), 1, "call mum",
                                                   at="2026-05-04T09:00:00")
    clock.set(utc(2026, 5, 4, 11, 0))  # two hours late
    async with world(tmp_path, clock=clock, tasks={"catch-up-minutes": 60}) as w:
        assert await w.timer.run_due() == 0  # whichever run of it saw the task first has marked it
        stored = await w.rt.core.repos.tasks.get(task.id)
        assert stored is not None and not stored.enabled and stored.missed_time == iso(utc(2026, 5, 4, 9, 0))
        assert w.reminder_turns() == [] and w.sent_to(OWNER) == []
    async with FakeTelegram() as tg:  # one server: its message ids go on across the restarts
        async with world(tmp_path, clock=clock, tg=tg, tasks={"catch-up-minutes": 60}) as w:  # not lost
            first = await w.tell(OWNER, "good morning")
            second = await w.tell(OWNER, "anything else?")
        async with world(tmp_path, clock=clock, tg=tg, tasks={"catch-up-minutes": 60}) as w:  # nor repeated
            third = await w.tell(OWNER, "hello again")
    assert first == "(While I was offline I missed a reminder due 2026-05-04 09:00: call mum)\n\nok"
    assert second == third == "ok"
    assert all(SCHEDULED_MARK not in str(r.body) for r in w.chats())


@pytest.mark.parametrize("model_up", [True, False], ids=["model-answers", "model-down"])
async def test_a_catch_up_run_leaves_the_missed_notice_to_the_persons_next_message(
    tmp_path: Path, model_up: bool,
) -> None:
    clock = SteppedClock(utc(2026, 5, 4, 8, 0))
    olga = Sender(str(OWNER), "Olga")
    async with world(tmp_path, clock=clock, tasks={"catch-up-minutes": 60}) as w:
        await service_at(w, clock).schedule(OWNER_CHAT, olga, 1, "call mum", at="2026-05-04T09:00:00")
        await service_at(w, clock).schedule(OWNER_CHAT, olga, 1, "water the plants", at="2026-05-04T10:30:00")
    clock.set(utc(2026, 5, 4, 11, 0))  # 09:00 is two hours late (missed), 10:30 half an hour (caught up)
    async with world(tmp_path, clock=clock, tasks={"catch-up-minutes": 60}) as w:
        if not model_up:  # the reminder goes out as written
            w.reminder_reply = lambda instruction: ErrorReply(500, "api_error", "down")
        await w.until(lambda: len(w.sent_to(OWNER)) >= 1, "the catch-up run")
        reminder = w.sent_to(OWNER)[0]
        answer = await w.tell(OWNER, "good morning")
        again = await w.tell(OWNER, "anything else?")
        conversation = await w.rt.core.repos.conversations.active_for_chat(f"tg:{OWNER}")
        assert conversation is not None
        stored = await w.rt.core.repos.messages.after(conversation.id, 0, limit=50)
    notice = "(While I was offline I missed a reminder due 2026-05-04 09:00: call mum)"
    assert reminder == ("It is time!" if model_up else "Reminder: water the plants")
    assert (answer, again) == (f"{notice}\n\nok", "ok")
    # Stored as part of the reply, so the conversation's history (the web page) shows it too.
    replies = [m.content for m in stored if m.role == "assistant"]
    assert replies == [reminder, f"{notice}\n\nok", "ok"]


async def test_a_time_that_passes_while_the_model_thinks_is_due_at_once_not_refused(tmp_path: Path) -> None:
    clock = SteppedClock(utc(2026, 5, 4, 8, 0, 40))  # the message shows "08:00"; "in a minute" is 08:01
    async with world(tmp_path, clock=clock) as w:
        tools = ChatTaskTools(service_at(w, clock), w.rt.core.prompts, OWNER_CHAT, Sender(str(OWNER), "Olga"), [])
        clock.set(utc(2026, 5, 4, 8, 1, 30))  # a slow model answers after its own `at`
        made = await tools.call(1, SCHEDULE_TOOL, {"message": "stretch", "at": "2026-05-04T08:01:00"})
        assert not made.is_error, made.content
        assert json.loads(made.content)["nextRun"] == "2026-05-04T08:01:30+00:00"
        this_minute = await tools.call(1, SCHEDULE_TOOL, {"message": "now", "at": "2026-05-04T08:00:00"})
        assert not this_minute.is_error, this_minute.content
        before = await tools.call(1, SCHEDULE_TOOL, {"message": "late", "at": "2026-05-04T07:59:00"})
        assert before.is_error and "is in the past" in before.content
        await w.until(lambda: len(w.sent_to(OWNER)) >= 2, "both reminders, at once")


async def test_a_notice_whose_read_fails_once_comes_with_the_next_reply(tmp_path: Path) -> None:
    """Reading a chat's missed runs can fail (a locked database): the person gets the storage
    apology, and the notice waits for the next reply instead of being dropped."""
    async with open_runtime(make_config(tmp_path), with_memory_worker=False) as rt:
        chat = ChatRef("console", "me", None)
        task = await rt.tasks.schedule(chat, Sender("me", "me"), 1, "call mum", at="2030-01-01T09:00:00")
        assert await rt.core.repos.tasks.miss(task.id, task.next_run_time, None)
        rt.tasks.note_missed(task)
        store = rt.core.repos.tasks
        read = store.missed_in
        failures = [sqlite3.OperationalError("database is locked")]

        async def flaky(where: ChatRef) -> list[TaskRecord]:
            if failures:
                raise failures.pop()
            return await read(where)

        store.missed_in = flaky  # type: ignore[method-assign]

        async def say(text: str) -> str:
            reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", text, is_admin=True))
            assert reply is not None
            return reply.text

        first, second, third = await say("hello"), await say("hello again"), await say("and again")
    assert first == rt.core.prompts.text("storage_error")
    assert "call mum" in second and "call mum" not in third
