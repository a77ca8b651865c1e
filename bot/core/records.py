"""Plain frozen values returned by the repositories."""

from __future__ import annotations

from dataclasses import dataclass

# What the conversation window reads of a message: (id, role, content, token_count,
# create_time, content_format), the columns of `MessageRepository.window_page`.
WindowRow = tuple[int, str, str, int, str, str]


@dataclass(frozen=True, slots=True)
class AgentRecord:
    id: int
    name: str
    create_time: str


@dataclass(frozen=True, slots=True)
class PersonRecord:
    """A person, the channel accounts (`telegram:111`) that are them, and their own agent if made yet."""

    id: int
    name: str
    create_time: str
    accounts: tuple[str, ...] = ()
    agent_id: int | None = None


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    id: str
    agent_id: int
    channel: str
    chat_key: str
    title: str | None
    trigger_source: str
    summary: str | None
    summary_upto_message_id: int
    memory_upto_message_id: int
    create_time: str
    update_time: str
    archived: bool
    is_group: bool = False  # a Telegram group or a Discord server channel: several people speak


@dataclass(frozen=True, slots=True)
class ConversationActivity:
    """A conversation with when its last message was stored and how many it holds."""

    conversation: ConversationRecord
    last_activity: str
    message_count: int


@dataclass(frozen=True, slots=True)
class MessageRecord:
    id: int
    conversation_id: str
    role: str
    content: str
    token_count: int
    sender_id: str | None
    sender_name: str | None
    create_time: str
    content_format: str = "text"  # text | blocks (a JSON array of Messages API content blocks)


@dataclass(frozen=True, slots=True)
class WorkspaceFileRecord:
    id: int
    agent_id: int
    filename: str
    content: str
    file_size: int
    enabled: bool
    sort_order: int
    create_time: str
    update_time: str
    deleted: bool
    version: int


@dataclass(frozen=True, slots=True)
class PendingMemoryRecord:
    conversation_id: str
    agent_id: int
    upto_message_id: int
    trigger_source: str
    attempts: int
    due_time: str
    last_error: str | None


@dataclass(frozen=True, slots=True)
class MemoryRunRecord:
    id: int
    agent_id: int
    kind: str
    conversation_id: str | None
    status: str
    reason: str | None
    started: str
    finished: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class UnanalysedConversation:
    """A conversation whose newest messages memory extraction has not seen, and no pending row."""
    conversation_id: str
    agent_id: int
    trigger_source: str
    message_count: int
    last_message_id: int
    last_user_text: str  # without a group's "[Name] " prefix
