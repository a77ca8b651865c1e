"""The cached prefix (model, tools, system prompt) each direct conversation's last chat request wrote.

Memory extraction for a conversation runs minutes after its turn, with the same model. Its
own instructions and copies of PROFILE.md and MEMORY.md were 4 500 uncached tokens a call; the
chat's prefix already holds the memory files (as the conversation's snapshot) and is in the
provider's cache, so an extraction that repeats it byte for byte reads it at a tenth of the
price and sends only its instructions and the transcript (memory/extraction/summarization.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.llm.cache_lifetime import CACHE_LIFETIMES, still_cached
from bot.llm.port import CacheTtl

# A request sent this close to the entry's end may reach the provider after it expired.
_MARGIN = timedelta(seconds=20)


@dataclass(frozen=True, slots=True)
class ChatPrefix:
    model: str
    system: str
    split: int  # where the base prompt ends and the workspace files begin (a breakpoint)
    tools: list[dict[str, Any]]
    ttl: CacheTtl
    sent_at: datetime

    def warm(self, now: datetime) -> bool:
        return still_cached(self.sent_at, CACHE_LIFETIMES[self.ttl] - _MARGIN, now)


class ChatPrefixes:
    """Per conversation, in process memory only (after a restart extraction sends its own prompt)."""

    _MAX_CONVERSATIONS = 4096  # forgotten all at once past this: those extractions send their own

    def __init__(self) -> None:
        self._prefixes: dict[str, ChatPrefix] = {}

    def sent(self, conversation_id: str, prefix: ChatPrefix | None) -> None:
        """A chat request went out with `prefix` cached (None: uncached, or a prefix not to share)."""
        if prefix is None:
            self._prefixes.pop(conversation_id, None)
            return
        if len(self._prefixes) >= self._MAX_CONVERSATIONS and conversation_id not in self._prefixes:
            self._prefixes.clear()
        self._prefixes[conversation_id] = prefix

    def warm(self, conversation_id: str, model: str, now: datetime) -> ChatPrefix | None:
        """The conversation's prefix if it was cached for `model` and is still in the cache."""
        prefix = self._prefixes.get(conversation_id)
        if prefix is None or prefix.model != model or not prefix.warm(now):
            return None
        return prefix
