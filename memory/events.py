"""The events of memory work: a reply completed (for extraction), and an extraction committed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ConversationCompletedEvent:
    agent_id: int
    conversation_id: str
    user_message: str
    assistant_reply: str
    message_count: int
    trigger_source: str  # web | channel | console | cron


class MemoryEventSink(Protocol):
    """Where the router and the window hand memory work (implemented by the memory worker)."""

    async def publish(self, event: ConversationCompletedEvent, upto_message_id: int) -> None:
        """Record the event durably (mate_memory_pending), then queue it; never waits for the analysis."""
        ...

    async def record_fold(self, agent_id: int, conversation_id: str, upto_message_id: int) -> None:
        """Messages <= upto_message_id leave the window: record that they still need analysing."""
        ...


class NullMemorySink:
    """Used when memory is off (and by commands that run without the worker)."""

    async def publish(self, event: ConversationCompletedEvent, upto_message_id: int) -> None:
        return None

    async def record_fold(self, agent_id: int, conversation_id: str, upto_message_id: int) -> None:
        return None


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file an extraction changed: its text before (empty for a new file) and after."""

    filename: str
    before: str
    after: str


@dataclass(frozen=True, slots=True)
class MemoryCommitted:
    """An extraction's writes are committed: the run, its conversation and what changed."""

    agent_id: int
    conversation_id: str
    run_id: int
    changes: tuple[FileChange, ...]


class CommitListener(Protocol):
    """Told after an extraction's transaction committed (never for one that did not)."""

    async def committed(self, event: MemoryCommitted) -> None: ...
