"""The cached prefix (model, tools, system prompt) each direct conversation's last chat request wrote.

Memory extraction for a conversation runs minutes after its turn, with the same model. Its
own instructions and copies of PROFILE.md and MEMORY.md were 4 500 uncached tokens a call; the
chat's prefix already holds the memory files (as the conversation's snapshot) and is in the
provider's cache, so an extraction that repeats it byte for byte reads it at a tenth of the
price and sends only its instructions and the transcript (memory/extraction/summarization.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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
    ttl: CacheTtl  # what the request's breakpoints were marked with: the lifetime of its conversation's entry
    sent_at: datetime
    # The tools-and-system entry's own lifetime and last renewal. A read renews an entry for its
    # own lifetime, and only the entry it reads: a prefix first written for 5 minutes stays a
    # 5-minute entry while later turns write their history for the hour, and once a turn reads
    # through the longer history entry, the shorter one is left to expire.
    prefix_ttl: CacheTtl | None = None  # None: as `ttl`, renewed at `sent_at`
    prefix_at: datetime | None = None
    # The conversation the request carried: its summary and the ids of its messages, in order.
    summary: str | None = None
    message_ids: tuple[int, ...] = ()

    def warm(self, now: datetime, *, history: bool = False) -> bool:
        """Whether the tools and system prompt (`history`: the whole conversation as the last
        request sent it) are still in the provider's cache."""
        if history:
            return still_cached(self.sent_at, CACHE_LIFETIMES[self.ttl] - _MARGIN, now)
        ttl, at = self.prefix_ttl or self.ttl, self.prefix_at or self.sent_at
        return still_cached(at, CACHE_LIFETIMES[ttl] - _MARGIN, now)

    def same_prefix(self, other: ChatPrefix) -> bool:
        return (self.model, self.system, self.tools) == (other.model, other.system, other.tools)

    def continued_by(self, summary: str | None, message_ids: tuple[int, ...]) -> bool:
        """A conversation that starts with the one this request carried: it can be read from
        the entry the request wrote."""
        return summary == self.summary and message_ids[:len(self.message_ids)] == self.message_ids


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
        kept = self._prefixes.get(conversation_id)
        if kept is not None and kept.same_prefix(prefix):
            now, ttl = prefix.sent_at, kept.prefix_ttl or kept.ttl
            if kept.warm(now):  # read again, so renewed for its own lifetime
                prefix = replace(prefix, prefix_ttl=ttl, prefix_at=now)
            elif kept.warm(now, history=True) and kept.continued_by(prefix.summary, prefix.message_ids):
                # read through the history's entry: the shorter one is left to expire
                prefix = replace(prefix, prefix_ttl=ttl, prefix_at=kept.prefix_at or kept.sent_at)
        self._prefixes[conversation_id] = prefix

    def warm(self, conversation_id: str, model: str, now: datetime, *, history: bool = False) -> ChatPrefix | None:
        """The conversation's prefix if it was cached for `model` and is still in the cache
        (`history`: with the conversation the last request sent)."""
        prefix = self._prefixes.get(conversation_id)
        if prefix is None or prefix.model != model or not prefix.warm(now, history=history):
            return None
        return prefix
