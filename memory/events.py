"""The event the router publishes after every reply (SPEC S6)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConversationCompletedEvent:
    agent_id: int
    conversation_id: str
    user_message: str
    assistant_reply: str
    message_count: int
    trigger_source: str  # web | channel | console | cron
