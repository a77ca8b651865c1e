"""What the router asks of reminders each turn (implemented by bot.tasks.tool.TurnTaskTools)."""

from __future__ import annotations

from typing import Protocol

from bot.tools import ToolSet
from channels.base import InboundMessage, RoutedReply


class TurnTasks(Protocol):
    def tools_for(self, message: InboundMessage) -> tuple[ToolSet, ...]:
        """The task tools the sender of `message` gets in its chat (none in a reminder's own turn)."""
        ...

    async def with_notice(self, message: InboundMessage, reply: RoutedReply) -> RoutedReply:
        """`reply`, led by a line for each run of this chat's tasks missed while the daemon was down."""
        ...

    def is_reminder_turn(self, text: str) -> bool:
        """Whether a stored user message is a reminder's own turn (start-up recovery answers it
        as one: memory extraction skips it)."""
        ...
