"""Reminders after the rules changed, and absurd times (SPEC S33): a reminder whose maker lost the
access or the route it was made with never runs on the agent it was made for, and is cancelled with
one log line; a time out of range is refused with a reason the model can pass on."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from bot.core.clock import iso, parse_iso
from bot.llm import AnthropicClient
from bot.app.runtime import open_runtime
from bot.app.services import start_services
from bot.storage.tasks import ChatRef, NewTask, TaskRecord
from bot.schedule.reminders.tool import SCHEDULE_TOOL
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, TextReply, ToolUseReply
from tests.support.fakes.telegram import FakeTelegram
from tests.support.eventually import eventually
from tests.support.clock import SteppedClock
from tests.support.tasks_env import FRIEND, FRIEND_DC, GROUP, OWNER, OWNER_DC, World, tool_results, world

LINKED = 55  # another Telegram account of the owner, linked through mate.people
OWNERS_SECRET = "the owner's bank PIN is 4711"  # in agent 1's MEMORY.md
CANCEL_LOGGER = "bot.schedule.timer"


def telegram(tg: FakeTelegram, *, admins: list[int], allowed: list[int]) -> dict[str, Any]:
    return {"telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url,
                         "admins": [str(a) for a in admins], "allowed-users": [str(a) for a in allowed],
                         "group-policy": "open", "require-mention": False}}


# The day these tests live in (a Wednesday): the tools, storage and the timer all keep it.
TODAY = datetime(2026, 3, 4, 9, 0, tzinfo=timezone.utc)


def tomorrow() -> str:
    """A time the tools accept: a day after TODAY."""
    return (TODAY + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:00")


async def schedule(w: World, chat_id: int, what: str, at: str, *, group: bool = False, user_id: int | None = None,
                   ) -> None:
    w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": what, "at": at}))
    w.llm.push(TextReply("Done."))
    await w.tell(chat_id, f"remind me: {what}", group=group, user_id=user_id)


async def live(w: World) -> list[TaskRecord]:
    return await w.rt.tasks.for_agent(None)


def cancel_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == CANCEL_LOGGER and "cancelled" in r.getMessage()]


def carries(w: World, text: str) -> bool:
    return any(text in json.dumps(r.body, ensure_ascii=False) for r in w.llm.requests)


@asynccontextmanager
async def fakes() -> AsyncIterator[tuple[FakeAnthropic, FakeTelegram]]:
    async with FakeAnthropic(default_text="ok") as llm, FakeTelegram() as tg:
        yield llm, tg


async def test_a_reminder_of_an_account_no_longer_admin_is_cancelled_not_run_on_the_owners_memory(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    at = tomorrow()
    async with fakes() as (llm, tg):
        async with world(tmp_path, llm=llm, tg=tg, clock=SteppedClock(TODAY),
                         channels=telegram(tg, admins=[OWNER], allowed=[FRIEND])) as w:
            await w.rt.core.workspace.write(1, "MEMORY.md", f"# Memory\n{OWNERS_SECRET}\n")
            await schedule(w, OWNER, "call the bank", at)
            await schedule(w, FRIEND, "water the plants", at)
            made = {t.created_by: t for t in await live(w)}
            assert made[str(OWNER)].agent_id == 1 and made[str(FRIEND)].agent_id != 1
        due = parse_iso(made[str(OWNER)].next_run_time or "")
        tg.sent.clear()
        llm.requests.clear()
        caplog.clear()

        # The operator took the account out of admins; it may still talk to the bot, as anyone listed.
        clock = SteppedClock(due)
        after = telegram(tg, admins=[], allowed=[FRIEND, OWNER])
        async with world(tmp_path, llm=llm, tg=tg, clock=clock, channels=after) as w:
            await w.until(lambda: len(w.sent_to(FRIEND)) == 1, "the friend's reminder")  # still runs
            await w.timer.run_due()
            assert [t.created_by for t in await live(w)] == []  # the friend's ran, the other was cancelled
            assert w.sent_to(OWNER) == []
            assert not carries(w, OWNERS_SECRET) and not carries(w, "call the bank")
            assert len(w.reminder_turns()) == 1
    [line] = cancel_lines(caplog)
    assert line.getMessage().startswith("1 pending reminder(s) cancelled") and line.levelno == logging.WARNING
    assert line.chat_id == str(OWNER)


async def test_a_reminder_is_cancelled_when_it_fires_after_its_maker_lost_the_route(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A task made while the account still reached agent 1 (stored before the rules changed) is
    checked at its run too, not only at start-up."""
    caplog.set_level(logging.INFO)
    async with fakes() as (llm, tg):
        clock = SteppedClock(datetime(2026, 5, 4, 8, 0, tzinfo=timezone.utc))
        after = telegram(tg, admins=[], allowed=[FRIEND, OWNER])
        async with world(tmp_path, llm=llm, tg=tg, clock=clock, channels=after) as w:
            await w.rt.core.workspace.write(1, "MEMORY.md", f"# Memory\n{OWNERS_SECRET}\n")
            chat = ChatRef("telegram", str(OWNER))
            nine = iso(datetime(2026, 5, 4, 9, 0, tzinfo=timezone.utc))
            for what, cron in (("call the bank", ""), ("pay the rent", "0 9 * * *")):
                await w.rt.core.repos.tasks.add(NewTask(
                    agent_id=1, message=what, cron=cron, timezone="UTC", run_at=None if cron else nine,
                    next_run_time=nine, chat=chat, created_by=str(OWNER), created_by_name="Olga"), limit=25)
            clock.set(datetime(2026, 5, 4, 9, 0, tzinfo=timezone.utc))
            assert await w.timer.run_due() == 0
            assert await live(w) == []
            assert w.sent_to(OWNER) == [] and not carries(w, OWNERS_SECRET) and w.reminder_turns() == []
    [line] = cancel_lines(caplog)
    assert line.getMessage().startswith("2 pending reminder(s) cancelled")


async def test_a_reminder_of_an_account_no_longer_linked_to_the_owner_is_cancelled(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    at = tomorrow()
    async with fakes() as (llm, tg):
        channels = telegram(tg, admins=[OWNER], allowed=[FRIEND, LINKED])
        linked = [{"name": "Olga", "ids": [f"telegram:{OWNER}", f"telegram:{LINKED}"]}]
        async with world(tmp_path, llm=llm, tg=tg, clock=SteppedClock(TODAY),
                         channels=channels, people=linked) as w:
            await w.rt.core.workspace.write(1, "MEMORY.md", f"# Memory\n{OWNERS_SECRET}\n")
            await schedule(w, LINKED, "feed the cat", at)
            await schedule(w, OWNER, "call the bank", at)
            assert {t.agent_id for t in await live(w)} == {1}  # both reached the owner's agent
            due = parse_iso((await live(w))[0].next_run_time or "")
        tg.sent.clear()
        llm.requests.clear()
        caplog.clear()

        clock = SteppedClock(due)
        unlinked = [{"name": "Olga", "ids": [f"telegram:{OWNER}"]}]
        async with world(tmp_path, llm=llm, tg=tg, clock=clock, channels=channels, people=unlinked) as w:
            await w.until(lambda: len(w.sent_to(OWNER)) == 1, "the owner's own reminder")  # still runs
            await w.timer.run_due()
            assert await live(w) == []
            assert w.sent_to(LINKED) == [] and not carries(w, "feed the cat")
            assert len(w.reminder_turns()) == 1
    [line] = cancel_lines(caplog)
    assert line.chat_id == str(LINKED)


async def test_a_group_reminder_that_needed_an_admin_is_cancelled_when_its_maker_is_no_longer_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    at = tomorrow()
    async with fakes() as (llm, tg):
        async with world(tmp_path, llm=llm, tg=tg, clock=SteppedClock(TODAY),
                         channels=telegram(tg, admins=[OWNER], allowed=[])) as w:
            await schedule(w, GROUP, "stand-up", at, group=True, user_id=OWNER)
            [task] = await live(w)
        tg.sent.clear()
        caplog.clear()
        clock = SteppedClock(parse_iso(task.next_run_time or ""))
        async with world(tmp_path, llm=llm, tg=tg, clock=clock, channels=telegram(tg, admins=[], allowed=[])) as w:
            await w.until(lambda: bool(cancel_lines(caplog)), "the cancellation")
            # Cancelled, not run: a run would have left the row, disabled, with its run time.
            assert await w.rt.core.repos.tasks.get(task.id) is None
            assert w.sent_to(GROUP) == [] and w.reminder_turns() == []
    [line] = cancel_lines(caplog)
    assert line.chat_id == str(GROUP)


async def test_a_discord_reminder_in_a_server_no_longer_allowed_is_cancelled_not_run(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A Discord channel's id does not tell its server: the reminder keeps the server it was made
    in, and the server rule is met again at its run, as every other rule is."""
    caplog.set_level(logging.INFO)
    async with fakes() as (llm, tg):
        async with world(tmp_path, llm=llm, tg=tg, clock=SteppedClock(TODAY), discord_too=True) as w:
            assert w.dc is not None  # the fake's server "100" is allowed
            w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "stand-up", "at": tomorrow()}))
            w.llm.push(TextReply("Done."))
            await w.dc.send_guild_message("remind us of the stand-up", author_id=OWNER_DC, mention_bot=True)
            await w.dc.wait_sent(1, timeout=15)
            [task] = await live(w)
            assert (task.chat.channel, task.chat.chat_id, task.place_id) == ("discord", "200", "100")
        llm.requests.clear()
        caplog.clear()

        # The operator took the server out of allowed-guilds; the maker is still an admin.
        clock = SteppedClock(parse_iso(task.next_run_time or ""))
        moved = {**telegram(tg, admins=[OWNER], allowed=[FRIEND]),
                 "discord": {"admins": [OWNER_DC], "allowed-users": [FRIEND_DC], "allowed-guilds": ["555"]}}
        async with world(tmp_path, llm=llm, tg=tg, clock=clock, channels=moved) as w:
            await w.until(lambda: bool(cancel_lines(caplog)), "the cancellation")
            assert await w.timer.run_due() == 0
            assert await w.rt.core.repos.tasks.get(task.id) is None  # cancelled: a run leaves the row
            assert w.reminder_turns() == [] and not carries(w, "stand-up")
    [line] = cancel_lines(caplog)
    assert line.getMessage().startswith("1 pending reminder(s) cancelled") and line.levelno == logging.WARNING
    assert line.chat_id == "200"


@pytest.mark.parametrize("still_allowed", [False, True])
async def test_a_discord_reminder_made_before_places_were_kept_has_its_server_found_and_checked(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, still_allowed: bool) -> None:
    """A reminder stored without its server (made by a version that did not keep it) is not let
    through the server rules: its channel's server is asked of Discord at the run, and kept."""
    caplog.set_level(logging.INFO)
    async with fakes() as (llm, tg):
        async with world(tmp_path, llm=llm, tg=tg, clock=SteppedClock(TODAY), discord_too=True) as w:
            assert w.dc is not None
            w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "stand-up", "at": tomorrow()}))
            w.llm.push(TextReply("Done."))
            await w.dc.send_guild_message("remind us of the stand-up", author_id=OWNER_DC, mention_bot=True)
            await w.dc.wait_sent(1, timeout=15)
            [task] = await live(w)
            await w.rt.core.db.execute("UPDATE mate_cron_job SET target_place_id = NULL WHERE id = ?", (task.id,))
        llm.requests.clear()
        caplog.clear()
        clock = SteppedClock(parse_iso(task.next_run_time or ""))
        guilds = ("100",) if still_allowed else ("555",)
        async with world(tmp_path, llm=llm, tg=tg, clock=clock, discord_too=True, discord_guilds=guilds) as w:
            if still_allowed:
                w.llm.push(TextReply("Time for the stand-up!"))
                await w.until(lambda: bool(w.reminder_turns()), "the reminder's turn")
                kept = await w.rt.core.repos.tasks.get(task.id)
                assert kept is not None and kept.place_id == "100"  # found, and kept for the next runs
            else:
                await w.until(lambda: bool(cancel_lines(caplog)), "the cancellation")
                assert await w.rt.core.repos.tasks.get(task.id) is None
                assert w.reminder_turns() == []


ABSURD = ["9999-12-31T23:59:59-05:00", "9999-12-31T23:59:59", "0001-01-01T00:00:00+05:00", "5000-06-01T09:00:00"]


@pytest.mark.parametrize("at", ABSURD)
async def test_schedule_task_with_an_absurd_time_gets_a_reason_and_logs_no_traceback(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, at: str) -> None:
    caplog.set_level(logging.DEBUG)
    async with world(tmp_path, timezone="America/New_York") as w:
        await schedule(w, OWNER, "call mum", at)
        [result] = [block for recorded in w.chats() for block in tool_results(recorded)]
        assert result.get("is_error")
        reason = json.loads(result["content"])["error"]
        assert "out of range" in reason and "Error" not in reason, reason
        assert await live(w) == []
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


async def test_an_absurd_time_is_refused_in_the_chats_language(tmp_path: Path) -> None:
    async with world(tmp_path, timezone="America/New_York", locale="zh-CN") as w:
        await schedule(w, OWNER, "call mum", "9999-12-31T23:59:59-05:00")
        [result] = [block for recorded in w.chats() for block in tool_results(recorded)]
        assert "超出范围" in json.loads(result["content"])["error"]


async def test_a_task_whose_check_fails_is_skipped_and_the_tasks_due_after_it_still_run(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The group's per-chat binding cannot be read (a broken database): its reminder's check fails,
    so it does not run, with one log line, and the owner's reminder due after it still does."""
    caplog.set_level(logging.INFO)
    at = tomorrow()
    async with fakes() as (llm, tg):
        clock = SteppedClock(TODAY)
        async with world(tmp_path, llm=llm, tg=tg, clock=clock,
                         channels=telegram(tg, admins=[OWNER], allowed=[])) as w:
            await schedule(w, GROUP, "stand-up", at, group=True, user_id=OWNER)  # first: it comes first
            await schedule(w, OWNER, "call the bank", at)
            group_task, owner_task = sorted(await live(w), key=lambda t: t.id)
            assert group_task.chat.chat_id == str(GROUP) and owner_task.chat.chat_id == str(OWNER)
            await w.rt.core.db.execute("DROP TABLE mate_chat_agent")
            clock.set(parse_iso(owner_task.next_run_time or ""))
            await w.until(lambda: len(w.sent_to(OWNER)) == 2, "the owner's reminder")  # the answer, the reminder
            await w.timer.run_due()
            assert [t.id for t in await live(w)] == [group_task.id]  # not run, not cancelled: tried again later
            assert (await w.rt.core.repos.tasks.get(group_task.id) or group_task).next_run_time \
                == group_task.next_run_time
            assert len(w.sent_to(GROUP)) == 1 and len(w.reminder_turns()) == 1  # only the scheduling's answer
    skipped = [r for r in caplog.records if r.name == CANCEL_LOGGER and f"task {group_task.id} not run" in r.getMessage()]
    assert len(skipped) == 1 and skipped[0].levelno == logging.WARNING and not skipped[0].exc_info


async def test_a_routing_change_cancels_the_reminders_without_creating_the_new_routes_agents(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Checking a route must not make what the route would make on a real message: an agent with
    its workspace and nightly job for every chat or person with a pending reminder."""
    caplog.set_level(logging.INFO)
    at = tomorrow()
    async with fakes() as (llm, tg):
        channels = telegram(tg, admins=[OWNER], allowed=[FRIEND])
        fixed = [{"channel": "*", "chat": "*", "agent": 1}]
        async with world(tmp_path, llm=llm, tg=tg, clock=SteppedClock(TODAY),
                         channels=channels, routing=fixed) as w:
            await schedule(w, GROUP, "stand-up", at, group=True, user_id=OWNER)
            await schedule(w, FRIEND, "water the plants", at)
            await schedule(w, OWNER, "call the bank", at)
            assert {t.agent_id for t in await live(w)} == {1}
            agents = len(await w.rt.core.repos.agents.list())
        caplog.clear()

        async with world(tmp_path, llm=llm, tg=tg, clock=SteppedClock(TODAY),
                         channels=channels) as w:  # per-chat and per-person again
            assert [t.created_by for t in await live(w) if t.chat.chat_id == str(OWNER)] == [str(OWNER)]
            assert [t for t in await live(w) if t.chat.chat_id != str(OWNER)] == []
            assert len(await w.rt.core.repos.agents.list()) == agents
            assert await w.rt.core.repos.agents.agent_for_chat(f"tg:{GROUP}") is None
    assert {line.chat_id for line in cancel_lines(caplog)} == {str(GROUP), str(FRIEND)}


async def test_the_daemons_task_timer_keeps_the_runtimes_clock(tmp_path: Path) -> None:
    """The clock is years away from today: a timer on the wall clock would not run the task due
    at it (and one running behind would call it missed)."""
    moment = datetime(2031, 5, 6, 9, 15, tzinfo=timezone.utc)
    async with FakeAnthropic(default_text="It is time!") as llm:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": llm.url, "max-retries": 0, "stream": False},
                             api={"enabled": False})
        async with AnthropicClient(config.mate.llm) as client, \
                open_runtime(config, llm=client, with_memory_worker=False, clock=lambda: moment) as rt:
            task_id = await rt.core.repos.tasks.add(NewTask(
                agent_id=1, message="water the plants", cron="", timezone="UTC", run_at=iso(moment),
                next_run_time=iso(moment), chat=ChatRef("console", "me"), created_by="me", created_by_name="Me"),
                limit=25)
            async with AsyncExitStack() as stack:
                services = await start_services(config, rt, stack)
                assert services.channels == () and services.api is None
                await eventually(lambda: any("water the plants" in json.dumps(r.body) for r in llm.requests),
                                 "the task due at the runtime's time to run")
            assert task_id is not None
            ran = await rt.core.repos.tasks.get(task_id)
    assert ran is not None and ran.last_run_time == iso(moment) and not ran.enabled
