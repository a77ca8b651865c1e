"""Stored messages as the labelled, one-line-per-message transcript a summarising model reads (SPEC S5, S6).

Compaction (the rolling conversation summary) and memory extraction both read a
conversation through this renderer; they differ only in their `TranscriptStyle`:
compaction keeps the tool work in view, extraction shows only what was said.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.core.content.messages import Content, decode_content, plain_text
from bot.core.prompts import PromptLibrary
from bot.core.records import MessageRecord

# The roles whose words a transcript shows; tool results only in a style with `tools`.
TRANSCRIPT_ROLES: tuple[str, ...] = ("user", "assistant")
TOOL_RESULT_CHARS = 300  # each tool result, in a style with `tools`
TOOL_INPUT_CHARS = 200  # each tool call's JSON input, in a style with `tools`
_LINE_BREAKS = re.compile(r"[ \t]*(?:\r\n|\r|\n)+[ \t]*")


@dataclass(frozen=True, slots=True)
class TranscriptStyle:
    """How much of each message a transcript shows."""

    max_chars: int  # a user/assistant message longer than this is cut, with the truncated marker
    tools: bool = False  # show the assistant's tool calls and the tool results


COMPACTION = TranscriptStyle(max_chars=6000, tools=True)


def _one_line(text: str) -> str:
    # One message per line keeps the transcript unambiguous: a message that itself
    # contains "\nAssistant: ..." cannot pose as another speaker's turn.
    return _LINE_BREAKS.sub(" ", text).strip()


def _tool_calls(content: Content) -> list[str]:
    if isinstance(content, str):
        return []
    return [f"[tool {b.get('name')}({json.dumps(b.get('input'), ensure_ascii=False)[:TOOL_INPUT_CHARS]})]"
            for b in content if b.get("type") == "tool_use"]


def _tool_results(content: Content) -> str:
    if isinstance(content, str):
        return ""
    return "; ".join(str(b.get("content", ""))[:TOOL_RESULT_CHARS] for b in content)


def _without_speaker(text: str, message: MessageRecord) -> str:
    """A group message without the "[Name] " the router stored before it (its label says who)."""
    for name in (message.sender_name, message.sender_id):
        if name and text.startswith(f"[{name}] "):
            return text[len(name) + 3:]
    return text


class TranscriptRenderer:
    """Renders stored messages as `User: ...` / `Assistant: ...` lines, labelled in the locale.

    With `speakers` ({sender id: "P1 Alice"}, a group's extraction) a person's line is
    labelled with who said it instead.
    """

    def __init__(self, prompts: PromptLibrary, speakers: Mapping[str, str] | None = None) -> None:
        self._prompts = prompts
        self._speakers = speakers or {}

    def line(self, message: MessageRecord, style: TranscriptStyle) -> str | None:
        """The message's one line; None when it has nothing to show in this style.

        A `text` row is shown as it is, even when it looks like JSON; of a `blocks` row
        only the text blocks (and, with `tools`, the tool calls) are shown.
        """
        content = decode_content(message.content, message.content_format)
        if message.role == "tool":
            results = _one_line(_tool_results(content)) if style.tools else ""
            return f"[tool result] {results}" if results else None
        if message.role not in TRANSCRIPT_ROLES:
            return None  # a system note is neither speaker's words
        text = plain_text(content)
        speaker = self._speakers.get(message.sender_id or "") if message.role == "user" else None
        if speaker:
            text = _without_speaker(text, message)
        if style.tools:
            text = " ".join([text, *_tool_calls(content)])
        text = _one_line(text)
        if not text:
            return None
        if len(text) > style.max_chars:
            text = text[:style.max_chars] + self._prompts.text("truncated_marker")
        if speaker:
            return f"{speaker}: {text}"
        label = self._prompts.text("transcript_user" if message.role == "user" else "transcript_assistant")
        return label + text

    def render(self, messages: Sequence[MessageRecord], style: TranscriptStyle) -> str:
        """The messages' lines, in order, joined by newlines."""
        lines = (self.line(message, style) for message in messages)
        return "\n".join(line for line in lines if line is not None)


def build_transcript(messages: Sequence[MessageRecord], prompts: PromptLibrary, max_chars: int,
                     speakers: Mapping[str, str] | None = None) -> str:
    """Memory extraction's transcript: what was said, one line per message, each cut at max_chars."""
    return TranscriptRenderer(prompts, speakers).render(messages, TranscriptStyle(max_chars=max_chars))
