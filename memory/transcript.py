"""Render stored messages as the `User: ...` / `Assistant: ...` transcript of memory extraction (SPEC S6)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from bot.prompts import PromptLibrary
from bot.storage.records import MessageRecord

TRANSCRIPT_ROLES: tuple[str, ...] = ("user", "assistant")
_LINE_BREAKS = re.compile(r"[ \t]*(?:\r\n|\r|\n)+[ \t]*")


def message_text(message: MessageRecord) -> str | None:
    """The readable text of a user/assistant message; None when it has nothing to show.

    Tool and system turns are skipped. Of a turn stored as content blocks (an assistant
    turn that called tools) only the text blocks are kept; a `text` row is shown as it is,
    even when the model answered with something that looks like JSON.
    """
    if message.role not in TRANSCRIPT_ROLES:
        return None
    content = message.content
    if message.content_format == "blocks":
        try:
            blocks = json.loads(content)
        except ValueError:
            blocks = None
        if isinstance(blocks, list):
            texts = [
                str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"
            ]
            content = "\n".join(t for t in texts if t.strip())
    # One message per line keeps the transcript unambiguous: a message that itself
    # contains "\nAssistant: ..." cannot pose as another speaker's turn.
    flat = _LINE_BREAKS.sub(" ", content).strip()
    return flat or None


def build_transcript(messages: Sequence[MessageRecord], prompts: PromptLibrary, max_chars: int) -> str:
    """One line per user/assistant message, labelled in the locale, each cut at max_chars."""
    labels = {"user": prompts.text("transcript_user"), "assistant": prompts.text("transcript_assistant")}
    marker = prompts.text("truncated_marker")
    lines: list[str] = []
    for message in messages:
        text = message_text(message)
        if text is None:
            continue
        if len(text) > max_chars:
            text = text[:max_chars] + marker
        lines.append(labels[message.role] + text)
    return "\n".join(lines)
