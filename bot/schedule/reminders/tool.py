"""The schedule_task, list_tasks and cancel_task tools, bound to the chat and sender of one turn."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from bot.core.prompts import PromptLibrary
from bot.storage.tasks import ChatRef
from bot.conversation.reminder_port import MissedNotice
from bot.conversation.reminder_port import chat_of
from bot.schedule.reminders.service import Sender, TaskProblem, TaskService
from bot.core.tools import ToolForm, ToolResult, ToolSet, compact_definitions
from channels.base import InboundMessage

log = logging.getLogger(__name__)

SCHEDULE_TOOL = "schedule_task"
LIST_TOOL = "list_tasks"
CANCEL_TOOL = "cancel_task"
TASK_TOOLS = frozenset({SCHEDULE_TOOL, LIST_TOOL, CANCEL_TOOL})
_GAP = "\x00"
OffTheRecord = Callable[[int], Awaitable[bool]]  # whether a message id is in an incognito span  # stands for the reminder turn's variable parts when its fixed text is looked for


def definitions(default_zone: str, min_interval: str) -> list[dict[str, Any]]:
    """The three tool definitions; the same for every chat, so the provider's prompt cache holds them."""
    return [
        {
            "name": SCHEDULE_TOOL,
            "description": (
                "Schedule a message for this chat: a reminder (\"remind me tomorrow at 9 to call mum\") or a "
                "repeating task. At that time you get `message` as an instruction and write the message "
                "yourself. Give exactly one of `in_minutes`, `at` or `cron`. Use `in_minutes` for a delay "
                "(\"in 10 minutes\": 10, \"in 2 hours\": 120), `at` for a clock time (\"tomorrow at 9\"). "
                "Use `cron` only when the person asks for a repeating one (\"every Monday at 9\")."
            ),
            "input_schema": {
                "type": "object",
                "properties": {
                    "message": {"type": "string", "description": "What to say or do then, e.g. \"call mum\"."},
                    "in_minutes": {"type": "integer", "description": "Once, this many minutes from now."},
                    "at": {"type": "string",
                           "description": "Once: local date and time, ISO 8601, e.g. 2026-12-04T09:00:00."},
                    "cron": {"type": "string",
                             "description": "Repeating: five cron fields (minute hour day month weekday), at "
                                            f"most every {min_interval} minutes, e.g. \"0 9 * * 1\"."},
                    "timezone": {"type": "string", "description": f"IANA zone of at/cron; default {default_zone}."},
                },
                "required": ["message"],
            },
        },
        {
            "name": LIST_TOOL,
            "description": "List this chat's scheduled tasks and reminders.",
            "input_schema": {"type": "object", "properties": {}},
        },
        {
            "name": CANCEL_TOOL,
            "description": "Cancel one of this chat's scheduled tasks.",
            "input_schema": {
                "type": "object",
                "properties": {"taskId": {"type": "integer", "description": "From list_tasks or schedule_task."}},
                "required": ["taskId"],
            },
        },
    ]


# The compact form's one-liners (mate.llm.tools: compact; bot.core.tools.compact_definitions):
# what a call needs that the bare schema does not say.
SHORT_DESCRIPTIONS: dict[str, str] = {
    SCHEDULE_TOOL: "Remind once (in_minutes from now, or at: local ISO time) or repeat (cron).",
    LIST_TOOL: "List scheduled tasks.",
    CANCEL_TOOL: "Cancel a scheduled task.",
}


def _error(text: str, fix: str = "") -> ToolResult:
    """A refusal for the model: what is wrong (`error`, which the person may be shown as the reason)
    and, apart from it, what to do about it (`fix`)."""
    payload = {"error": text, "fix": fix} if fix else {"error": text}
    return ToolResult(json.dumps(payload, ensure_ascii=False), is_error=True)


def _ok(data: dict[str, Any]) -> ToolResult:
    return ToolResult(json.dumps(data, ensure_ascii=False))


class ChatTaskTools:
    """The task tools for a sender who may schedule, acting on the chat of this turn only."""

    def __init__(self, service: TaskService, prompts: PromptLibrary, chat: ChatRef, sender: Sender,
                 offered: list[dict[str, Any]], off_the_record: OffTheRecord | None = None, *,
                 place_id: str | None = None) -> None:
        self._service = service
        self._place_id = place_id  # the chat's group or server, kept with each task made here
        self._off_the_record = off_the_record
        self._asked_at = service.now()  # built as the turn begins, with the time the model is shown
        self._prompts = prompts
        self._chat = chat
        self._sender = sender
        self._offered = offered

    def definitions(self) -> list[dict[str, Any]]:
        return self._offered

    def handles(self, name: str) -> bool:
        return name in TASK_TOOLS

    async def call(self, agent_id: int, name: str, arguments: Any, *, asked_in: int | None = None) -> ToolResult:
        if not isinstance(arguments, dict):
            return _error(self._prompts.text("tool_bad_input", error="the input must be a JSON object"))
        if name == SCHEDULE_TOOL:
            if asked_in is not None and self._off_the_record is not None and await self._off_the_record(asked_in):
                # A reminder outlives the incognito messages it came from: its words would not.
                return _error(self._prompts.text("task_error_incognito"), self._prompts.text("task_fix_incognito"))
            try:
                task = await self._service.schedule(
                    self._chat, self._sender, agent_id, arguments.get("message"), at=arguments.get("at"),
                    cron=arguments.get("cron"), zone=arguments.get("timezone"), asked_at=self._asked_at,
                    place_id=self._place_id, in_minutes=arguments.get("in_minutes"))
            except TaskProblem as problem:
                return _error(str(problem), self._prompts.text("task_fix_schedule"))
            return _ok({"taskId": task.id, "nextRun": self._service.next_run_text(task), "timezone": task.timezone})
        if name == LIST_TOOL:
            tasks = await self._service.in_chat(self._chat)
            return _ok({"count": len(tasks), "tasks": [self._service.describe(task) for task in tasks]})
        task_id = arguments.get("taskId")
        if isinstance(task_id, str) and task_id.strip().isdigit() and len(task_id.strip()) <= 18:
            task_id = int(task_id.strip())  # small models write numbers as text
        if not isinstance(task_id, int) or isinstance(task_id, bool) or not 0 < task_id < 2**63:
            return _error(self._prompts.text("task_error_id"), self._prompts.text("task_fix_id"))
        if not await self._service.cancel_in_chat(self._chat, task_id):
            return _error(self._prompts.text("task_error_not_found", task_id=task_id))
        return _ok({"taskId": task_id, "cancelled": True})


class RefusedTaskTools:
    """For a sender who may not schedule here: nothing is offered, and a call the model makes
    anyway (it saw the tools used earlier in the chat) gets a clear refusal to pass on."""

    def __init__(self, prompts: PromptLibrary) -> None:
        self._prompts = prompts

    def definitions(self) -> list[dict[str, Any]]:
        return []

    def handles(self, name: str) -> bool:
        return name in TASK_TOOLS

    async def call(self, agent_id: int, name: str, arguments: Any, *, asked_in: int | None = None) -> ToolResult:
        return _error(self._prompts.text("task_not_allowed"))


class TurnTaskTools:
    """What the router asks of tasks each turn: the tools this sender gets, and the missed runs to mention."""

    def __init__(self, service: TaskService, prompts: PromptLibrary, off_the_record: OffTheRecord | None = None,
                 *, form: ToolForm = "full") -> None:
        self._service = service
        self._prompts = prompts
        self._off_the_record = off_the_record
        # One list for every turn: the agent's token count is cached by identity.
        offered = definitions(service.default_zone, service.min_interval_text)
        self._offered = compact_definitions(offered, SHORT_DESCRIPTIONS) if form == "compact" else offered
        self._refused = RefusedTaskTools(prompts)

    def tools_for(self, message: InboundMessage) -> tuple[ToolSet, ...]:
        if message.trigger_source == "cron":  # a reminder's own turn never makes another one
            return ()
        if not self._service.may_schedule(message):
            return (self._refused,)
        sender = Sender(message.sender_id, message.sender_name or message.sender_id)
        return (ChatTaskTools(self._service, self._prompts, chat_of(message), sender, self._offered,
                              self._off_the_record, place_id=message.place_id),)

    async def take_notice(self, message: InboundMessage) -> MissedNotice | None:
        return await self._service.take_notice(message)

    async def settle_notice(self, notice: MissedNotice, *, shown: bool) -> None:
        await self._service.settle_notice(notice, shown=shown)

    def is_reminder_turn(self, text: str) -> bool:
        for repeating in (False, True):
            head, _, rest = self._prompts.render("tasks/reminder-turn", message=_GAP, created_by=_GAP,
                                                 repeating=repeating).partition(_GAP)
            tail = rest.rpartition(_GAP)[2]
            if text.startswith(head) and text.endswith(tail.strip()) and len(text) > len(head) + len(tail.strip()):
                return True
        return False
