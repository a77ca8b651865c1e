"""TaskService: the rules of reminders — who may schedule, the limits, one chat's tasks, missed runs to mention."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from bot.conversation.access import AccessPolicies
from bot.core.clock import Clock, iso, parse_iso, utc_now
from bot.core.config import TasksConfig
from bot.core.prompts import PromptLibrary
from bot.storage.tasks import ChatRef, NewTask, TaskRepository, TaskRecord
from bot.conversation.reminder_port import MissedNotice, chat_of
from bot.schedule.timing import OutOfRange, local_text, next_fire, parse_at, parse_cron, shortest_gap, zone_of
from channels.base import InboundMessage

log = logging.getLogger(__name__)

MAX_TASK_MESSAGE_CHARS = 2000
# A one-shot time further ahead is a slip (the model added minutes by the billion, or wrote 9999):
# refused with a reason rather than stored for a calendar whose end the time arithmetic meets.
MAX_YEARS_AHEAD = 100


class TaskProblem(Exception):
    """A request the rules refuse; the text says why, in the chat's language."""


@dataclass(frozen=True, slots=True)
class Sender:
    id: str
    name: str


class TaskChanges:
    """Wakes the timer when a task is added or removed, so a reminder a few seconds ahead is not late."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            pass
        self._event.clear()


class TaskService:
    """Creates, lists and cancels reminders for one chat, the API and the CLI alike."""

    def __init__(
        self, config: TasksConfig, default_zone: str, store: TaskRepository, access: AccessPolicies,
        prompts: PromptLibrary, *, clock: Clock = utc_now,
    ) -> None:
        self._config = config
        self.default_zone = default_zone
        self._store = store
        self._access = access
        self._prompts = prompts
        self._clock = clock
        self.changes = TaskChanges()
        self._missed: set[ChatRef] = set()  # chats whose next reply mentions a missed run

    @property
    def min_interval_text(self) -> str:
        return _minutes(timedelta(minutes=self._config.min_interval_minutes))

    # -- who may -----------------------------------------------------------------------

    def may_schedule(self, message: InboundMessage) -> bool:
        """The owner and allowed people in direct chats; in groups the admins, or every member
        when group-members-may-schedule is on. A scheduled turn itself never may."""
        if message.trigger_source == "cron":
            return False
        policy = self._access.for_channel(message.channel)
        if policy.is_admin(message.sender_id):
            return True
        if message.is_direct:
            return policy.is_listed(message.sender_id)
        return self._config.group_members_may_schedule

    # -- one chat ----------------------------------------------------------------------

    def now(self) -> datetime:
        return self._clock()

    async def schedule(
        self, chat: ChatRef, sender: Sender, agent_id: int, message: Any, *, at: Any = None, cron: Any = None,
        zone: Any = None, asked_at: datetime | None = None, place_id: str | None = None, in_minutes: Any = None,
    ) -> TaskRecord:
        """A new task, or TaskProblem naming what is wrong (nothing is stored then).

        `asked_at` is when the turn began: the model works out `at` from the minute it was shown
        then, and a slow model can still be thinking when that moment passes. `place_id` is the
        group or server of the chat (the message's), which access rules admit again at each run."""
        t = self._prompts.text
        if not isinstance(message, str) or not message.strip() or len(message) > MAX_TASK_MESSAGE_CHARS:
            raise TaskProblem(t("task_error_message", limit=MAX_TASK_MESSAGE_CHARS))
        zone_name = self.default_zone if zone is None or zone == "" else zone
        if not isinstance(zone_name, str):
            raise TaskProblem(t("task_error_zone", timezone=str(zone_name)[:60]))
        try:
            zone_of(zone_name)
        except (ValueError, KeyError):
            raise TaskProblem(t("task_error_zone", timezone=zone_name[:60])) from None
        given = [name for name, value in (("in_minutes", in_minutes), ("at", at), ("cron", cron))
                 if value not in (None, "")]
        if len(given) != 1:
            raise TaskProblem(t("task_error_when"))
        now = self._clock()
        if given == ["in_minutes"]:
            first, expression, run_at = self._after(in_minutes, now, asked_at), "", True
        elif given == ["at"]:
            first, expression, run_at = self._one_shot(at, zone_name, now, asked_at), "", True
        else:
            first, expression, run_at = self._repeating(cron, zone_name, now), cron.strip(), False
        created = await self._store.add(NewTask(
            agent_id=agent_id, message=message.strip(), cron=expression, timezone=zone_name,
            run_at=iso(first) if run_at else None, next_run_time=iso(first), chat=chat,
            created_by=sender.id, created_by_name=sender.name, place_id=place_id), limit=self._config.max_per_chat)
        if created is None:
            raise TaskProblem(t("task_error_limit", limit=self._config.max_per_chat))
        task = await self._store.get(created)
        assert task is not None
        # As scheduled: the timer may already have run one that is due now (it polls too).
        task = replace(task, next_run_time=iso(first))
        self.changes.notify()
        log.info("task %s scheduled for %s", created, task.next_run_time,
                 extra={"channel": chat.channel, "chat_id": chat.chat_id})
        return task

    def _after(self, minutes: Any, now: datetime, asked_at: datetime | None) -> datetime:
        """`minutes` after the person asked (a small model need not add them to a clock time itself)."""
        if isinstance(minutes, str) and minutes.strip().isdigit() and len(minutes.strip()) <= 9:
            minutes = int(minutes.strip())  # small models write numbers as text
        limit = MAX_YEARS_AHEAD * 366 * 24 * 60
        if not isinstance(minutes, int) or isinstance(minutes, bool) or not 0 < minutes <= limit:
            raise TaskProblem(self._prompts.text("task_error_in_minutes", limit=limit))
        return max(_minute_of(asked_at or now) + timedelta(minutes=minutes), now)

    def _one_shot(self, at: Any, zone_name: str, now: datetime, asked_at: datetime | None) -> datetime:
        t = self._prompts.text
        if not isinstance(at, str):
            raise TaskProblem(t("task_error_at", problem="at must be a text such as 2026-12-04T09:00:00"))
        out_of_range = TaskProblem(t("task_error_range", at=at.strip()[:40], years=MAX_YEARS_AHEAD))
        try:
            moment = parse_at(at, zone_name)
        except OutOfRange:
            raise out_of_range from None
        except ValueError as exc:
            raise TaskProblem(t("task_error_at", problem=str(exc))) from None
        if moment.year > now.year + MAX_YEARS_AHEAD:
            raise out_of_range
        if moment <= now and asked_at is not None and moment >= _minute_of(asked_at):
            return now  # it was still ahead when the person asked: due at once, not refused
        if moment <= now:
            raise TaskProblem(t("task_error_past", at=at.strip()[:40], now=local_text(now, zone_name),
                                timezone=zone_name))
        return moment

    def _repeating(self, cron: Any, zone_name: str, now: datetime) -> datetime:
        t = self._prompts.text
        if not isinstance(cron, str):
            raise TaskProblem(t("task_error_cron", cron=str(cron)[:60], problem="cron must be a text"))
        try:
            trigger = parse_cron(cron.strip(), zone_name)
        except ValueError as exc:
            raise TaskProblem(t("task_error_cron", cron=cron.strip()[:60], problem=str(exc))) from None
        first = next_fire(trigger, now)
        if first is None:
            raise TaskProblem(t("task_error_cron", cron=cron.strip()[:60], problem="it never runs"))
        limit = timedelta(minutes=self._config.min_interval_minutes)
        gap = shortest_gap(trigger, now)
        if gap is not None and gap < limit:
            raise TaskProblem(t("task_error_interval", cron=cron.strip()[:60], minutes=_minutes(gap),
                                limit=_minutes(limit)))
        return first

    async def in_chat(self, chat: ChatRef) -> list[TaskRecord]:
        return await self._store.in_chat(chat)

    async def cancel_in_chat(self, chat: ChatRef, task_id: int) -> bool:
        """False for an id that is not a live task of this chat (another chat's is "not found")."""
        cancelled = await self._store.cancel(task_id, chat=chat)
        if cancelled:
            self.changes.notify()
            log.info("task %s cancelled in its chat", task_id, extra={"channel": chat.channel, "chat_id": chat.chat_id})
        return cancelled

    # -- every chat (API, CLI) ---------------------------------------------------------

    async def for_agent(self, agent_id: int | None) -> list[TaskRecord]:
        return await self._store.for_agent(agent_id)

    async def cancel_for_agent(self, agent_id: int, task_id: int) -> bool:
        cancelled = await self._store.cancel(task_id, agent_id=agent_id)
        if cancelled:
            self.changes.notify()
        return cancelled

    def describe(self, task: TaskRecord) -> dict[str, Any]:
        """A task as list_tasks shows it: {taskId, message, nextRun, cron?, createdBy}."""
        shown: dict[str, Any] = {"taskId": task.id, "message": task.message, "nextRun": self.next_run_text(task)}
        if task.cron:
            shown["cron"] = task.cron
        shown["createdBy"] = task.created_by_name or task.created_by
        return shown

    def next_run_text(self, task: TaskRecord) -> str | None:
        if not task.next_run_time:
            return None
        try:
            return local_text(parse_iso(task.next_run_time), task.timezone)
        except (ValueError, KeyError):
            return task.next_run_time

    # -- missed runs -------------------------------------------------------------------

    async def load_missed(self) -> None:
        """The chats with a missed run still to mention (read when the timer starts)."""
        self._missed.update(await self._store.chats_with_missed())

    def note_missed(self, task: TaskRecord) -> None:
        self._missed.add(task.chat)

    async def take_notice(self, message: InboundMessage) -> MissedNotice | None:
        """One line per missed run of this chat, for the reply to a person's own message (a
        scheduled turn never takes them); the chat's runs are held until `settle_notice`."""
        chat = chat_of(message)
        if message.trigger_source == "cron" or chat not in self._missed:
            return None
        missed = await self._store.missed_in(chat)  # read first: a failed read keeps the chat's runs
        self._missed.discard(chat)
        lines: list[str] = []
        runs: list[tuple[int, str]] = []
        for task in missed:
            assert task.missed_time is not None
            when = local_text(parse_iso(task.missed_time), task.timezone)[:16].replace("T", " ")
            lines.append(self._prompts.text("task_missed_notice", message=task.message, when=when))
            runs.append((task.id, task.missed_time))
        return MissedNotice(chat, "\n".join(lines), tuple(runs)) if runs else None

    async def settle_notice(self, notice: MissedNotice, *, shown: bool) -> None:
        """Each run is mentioned once: forgotten when the notice went out, else kept for the next reply."""
        if not shown:
            self._missed.add(notice.chat)
            return
        for task_id, missed_time in notice.runs:
            await self._store.forget_missed(task_id, missed_time)


def _minute_of(moment: datetime) -> datetime:
    """The start of the minute the turn's time label shows."""
    return moment.replace(second=0, microsecond=0)


def _minutes(span: timedelta) -> str:
    minutes = span.total_seconds() / 60
    return f"{minutes:g}" if minutes != int(minutes) else str(int(minutes))
