"""What conversation asks of reminders: the router each turn (TurnTasks, implemented by
bot.schedule.reminders.tool.TurnTaskTools) and /tasks (ChatTasks, by TaskService)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.storage.tasks import ChatRef, TaskRecord
from bot.core.tools import ToolSet
from channels.base import InboundMessage


@dataclass(frozen=True, slots=True)
class MissedNotice:
    """The lines about a chat's runs missed while the daemon was down, held for one reply."""

    chat: ChatRef
    text: str
    runs: tuple[tuple[int, str], ...]  # (task id, missed time): cleared once the lines went out


class TurnTasks(Protocol):
    def tools_for(self, message: InboundMessage) -> tuple[ToolSet, ...]:
        """The task tools the sender of `message` gets in its chat (none in a reminder's own turn)."""
        ...

    async def take_notice(self, message: InboundMessage) -> MissedNotice | None:
        """The missed runs the reply to `message` mentions, held from other replies until
        `settle_notice`; none for a scheduled turn (its reply is no answer to the person)."""
        ...

    async def settle_notice(self, notice: MissedNotice, *, shown: bool) -> None:
        """Forget the runs once the notice went out with a reply; otherwise keep them for the next."""
        ...

    def is_reminder_turn(self, text: str) -> bool:
        """Whether a stored user message is a reminder's own turn (start-up recovery answers it
        as one: memory extraction skips it)."""
        ...


class ChatTasks(Protocol):
    """One chat's reminders as /tasks shows and cancels them."""

    def may_schedule(self, message: InboundMessage) -> bool: ...

    async def in_chat(self, chat: ChatRef) -> list[TaskRecord]: ...

    async def cancel_in_chat(self, chat: ChatRef, task_id: int) -> bool: ...

    def next_run_text(self, task: TaskRecord) -> str | None: ...


def chat_of(message: InboundMessage) -> ChatRef:
    """The chat a message came from, as tasks are kept by it."""
    return ChatRef(message.channel, message.chat_id, message.thread_id)
