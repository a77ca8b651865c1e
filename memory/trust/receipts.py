"""MemoryReceipts: after an extraction committed, tell its chat in a few lines what was kept (SPEC S29).

What changed is said without another model call: the lines an extraction added to a file
are the facts the model wrote (its prompts ask for one short fact per line), so a receipt
quotes them, shortened, with the file they went to. A file that only lost lines says what
was dropped. Today's note is quoted only when nothing else changed: it retells the
conversation, while PROFILE.md and MEMORY.md hold what will be remembered.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from bot.core.prompts import PromptLibrary
from bot.storage import Repositories
from channels.base import OutboundMessage, conversation_target
from memory.events import FileChange, MemoryCommitted
from memory.workspace.filenames import is_daily_note_name

log = logging.getLogger(__name__)

MAX_LINES = 3
LINE_CHARS = 80
ReceiptMode = Literal["direct", "all", "off"]


# A receipt is sent inside the agent's memory run: a channel that is reconnecting must not hold
# the next extraction up for the outbox's usual minute. Not sent then; /memory history has it.
RECEIPT_READY_WAIT = 5.0


class Outbox(Protocol):
    """Where a message to a chat leaves: False when that chat's channel is not running here (or
    not back within `ready_wait` seconds)."""

    async def send(self, message: OutboundMessage, *, ready_wait: float | None = None) -> bool: ...


@dataclass(frozen=True, slots=True)
class _Item:
    kind: Literal["noted", "dropped"]
    text: str
    filename: str


def _fact(line: str) -> str:
    """A line without its markdown bullet or heading marks and surrounding space."""
    text = line.strip()
    while text[:1] in ("-", "*", "+", ">") and text[1:2] in (" ", ""):
        text = text[2:].strip()
    return text


def _shortened(text: str, limit: int = LINE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _items(change: FileChange) -> list[_Item]:
    """The facts a change added (or, when it added none, dropped), headings left out."""
    def facts(text: str) -> list[str]:
        return [_fact(line) for line in text.splitlines() if _fact(line) and not line.lstrip().startswith("#")]

    before, after = facts(change.before), facts(change.after)
    had, has = set(before), set(after)
    added = [_Item("noted", fact, change.filename) for fact in after if fact not in had]
    if added:
        return added
    return [_Item("dropped", fact, change.filename) for fact in before if fact not in has]


def receipt_text(prompts: PromptLibrary, changes: Sequence[FileChange]) -> str:
    """At most three lines of what changed and how to take it back; "" when nothing did."""
    kept = [item for change in changes if not is_daily_note_name(change.filename) for item in _items(change)]
    if not kept:  # only today's note: its first new line says what the day's entry is about
        kept = [item for change in changes for item in _items(change)][:1]
    if not kept:
        return ""
    shown = kept if len(kept) <= MAX_LINES else kept[: MAX_LINES - 1]
    lines = [prompts.text(f"receipt_{item.kind}", text=_shortened(item.text), filename=item.filename)
             for item in shown]
    rest = kept[len(shown):]
    if rest:
        names = ", ".join(dict.fromkeys(item.filename for item in rest))
        lines.append(prompts.text("receipt_more", count=len(rest), filenames=names))
    lines.append(prompts.text("receipt_undo"))
    return "\n".join(lines)


class MemoryReceipts:
    """The CommitListener that sends receipts: direct chats, every chat, or none (`mate.memory.receipts`)."""

    def __init__(self, mode: ReceiptMode, repos: Repositories, outbox: Outbox, prompts: PromptLibrary,
                 *, ready_wait: float = RECEIPT_READY_WAIT) -> None:
        self._mode = mode
        self._ready_wait = ready_wait
        self._repos = repos
        self._outbox = outbox
        self._prompts = prompts

    async def committed(self, event: MemoryCommitted) -> None:
        if self._mode == "off":
            return
        conversation = await self._repos.conversations.get(event.conversation_id)
        if conversation is None or (conversation.is_group and self._mode != "all"):
            return
        target = conversation_target(conversation.id)
        text = receipt_text(self._prompts, event.changes)
        if target is None or not text:
            return
        channel, chat_id, thread_id = target
        message = OutboundMessage(channel, chat_id, text, thread_id)
        sent = await self._outbox.send(message, ready_wait=self._ready_wait)
        log.info("memory receipt for run %s %s", event.run_id, "sent" if sent else "not sent (channel not running or reconnecting)",
                 extra={"conversation_id": event.conversation_id})
