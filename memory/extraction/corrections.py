"""What an unusable extraction answer got wrong, kept so the next request about the same messages says so (SPEC S34)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Conversations remembered at once; one given up on keeps its entry until its next run.
_LIMIT = 256


@dataclass(frozen=True, slots=True)
class Correction:
    """An answer that could not be used and what was wrong with it: the next request for the same
    messages carries both after the prompt (the cached part stays as it was), so a retry is never
    the same request again."""
    reply: str
    note: str
    number: int = 1  # unusable answers in a row: the note says so, so even a repeated answer is
                     # followed by a request not sent before

    def turns(self) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": self.reply.strip() or "..."}, {"role": "user", "content": self.note}]


class PendingCorrections:
    """conversation -> the batch (the watermark it starts after) whose last answer was unusable, and why."""

    def __init__(self, limit: int = _LIMIT) -> None:
        self._limit = limit
        self._by_conversation: dict[str, tuple[int, Correction]] = {}

    def get(self, conversation_id: str, watermark: int) -> Correction | None:
        found = self._by_conversation.get(conversation_id)
        return found[1] if found is not None and found[0] == watermark else None

    def remember(self, conversation_id: str, watermark: int, correction: Correction | None) -> None:
        self._by_conversation.pop(conversation_id, None)
        if correction is None:
            return
        self._by_conversation[conversation_id] = (watermark, correction)
        while len(self._by_conversation) > self._limit:
            del self._by_conversation[next(iter(self._by_conversation))]

    def forget(self, conversation_id: str) -> None:
        self._by_conversation.pop(conversation_id, None)
