"""The small interfaces between the router and the command handler (so neither imports the other)."""

from __future__ import annotations

from typing import Protocol

from bot.conversation.people import Person
from bot.core.records import ConversationRecord
from channels.base import InboundMessage


class ChatControl(Protocol):
    """What a command may ask of the router."""

    def is_admin(self, message: InboundMessage) -> bool: ...

    async def person_of(self, message: InboundMessage) -> Person: ...

    async def new_conversation(self, conversation: ConversationRecord, message: InboundMessage) -> ConversationRecord: ...


class CommandPort(Protocol):
    """Answers a known slash command; None when the text is not one (it then goes to the model)."""

    async def handle(
        self, chat: ChatControl, message: InboundMessage, conversation: ConversationRecord, text: str,
    ) -> str | None: ...
