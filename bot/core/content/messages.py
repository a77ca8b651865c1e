"""Stored messages <-> Messages API messages: the one stored-content codec, exchanges, role merging."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from bot.core.records import WindowRow
from bot.core.text import storable

Content = str | list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """One stored message as the window sees it."""

    id: int
    role: str  # user | assistant | tool
    content: Content
    tokens: int
    time: str = ""  # when it was stored (UTC, stored form); user messages show it to the model

    @property
    def api_role(self) -> str:
        return "assistant" if self.role == "assistant" else "user"

    @property
    def has_tool_use(self) -> bool:
        return isinstance(self.content, list) and any(b.get("type") == "tool_use" for b in self.content)

    @property
    def starts_exchange(self) -> bool:
        return self.role == "user"


def encode_blocks(blocks: list[dict[str, Any]]) -> str:
    ordered = [{"type": b.get("type"), **{k: v for k, v in b.items() if k != "type"}} for b in blocks]
    # storable: a tool input with a lone surrogate (a "\ud800" escape) must still be storable.
    return storable(json.dumps(ordered, ensure_ascii=False, separators=(",", ":")))


def encode_content(content: Content) -> tuple[str, str]:
    """(stored text, content_format): the format is stored beside it, never guessed back."""
    if isinstance(content, str):
        return content, "text"
    return encode_blocks(content), "blocks"


def decode_content(content: str, content_format: str) -> Content:
    """A `blocks` row back to its block list; `text` rows stay text, whatever they look like."""
    if content_format != "blocks":
        return content
    try:
        blocks = json.loads(content)
    except json.JSONDecodeError:
        return content
    if isinstance(blocks, list) and all(isinstance(b, dict) for b in blocks):
        return blocks
    return content


def history_items(rows: list[WindowRow]) -> list[HistoryItem]:
    """The rows the window reads back (storage's WindowRow), as HistoryItems: `blocks` rows decoded."""
    return [HistoryItem(id_, role, content if content_format == "text" else decode_content(content, content_format),
                        tokens, created) for id_, role, content, tokens, created, content_format in rows]


def with_time(content: Content, label: str) -> Content:
    """A user message as the model sees it: the local time it was sent, then what was said."""
    if not label:
        return content
    if isinstance(content, str):
        return f"[{label}] {content}"
    for index, block in enumerate(content):  # images first, then the caption: the label goes on it
        if block.get("type") == "text":
            labelled = {**block, "text": f"[{label}] {block.get('text', '')}"}
            return [*content[:index], labelled, *content[index + 1:]]
    return [{"type": "text", "text": f"[{label}]"}, *content]


def with_note(note: str, content: Content) -> Content:
    """A block of context before the user's own words, as a text block of its own."""
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return [{"type": "text", "text": note}, *blocks]


# What with_time puts before a message, with MinuteLabels' "YYYY-MM-DD HH:MM".
TIME_LABEL = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] ?")


def without_time(text: str) -> str:
    return TIME_LABEL.sub("", text, count=1)


def plain_text(content: Content) -> str:
    """The text blocks of a message, one per line; blank ones left out."""
    if isinstance(content, str):
        return content
    # str(): a hand-edited or foreign row may hold a non-string text; it must not crash a turn.
    texts = (str(b.get("text") or "") for b in content if b.get("type") == "text")
    return "\n".join(text for text in texts if text.strip())


def split_exchanges(items: list[HistoryItem]) -> list[list[HistoryItem]]:
    """Group into exchanges: a user message and every assistant/tool message after it."""
    exchanges: list[list[HistoryItem]] = []
    for item in items:
        if item.starts_exchange or not exchanges:
            exchanges.append([item])
        else:
            exchanges[-1].append(item)
    return exchanges


def trim_units(items: list[HistoryItem]) -> list[list[HistoryItem]]:
    """The smallest droppable pieces: a tool_use message travels with its tool_result."""
    units: list[list[HistoryItem]] = []
    for item in items:
        if item.role == "tool" and units and units[-1][-1].has_tool_use:
            units[-1].append(item)
        else:
            units.append([item])
    return units


def _blocks(content: Content) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content if not (b.get("type") == "text" and not b.get("text"))]


def to_api_messages(items: list[tuple[str, Content]]) -> list[dict[str, Any]]:
    """(api role, content) pairs -> valid Messages API turns: same roles merged, no empty text."""
    merged: list[dict[str, Any]] = []
    for role, content in items:
        if not isinstance(content, str):
            content = _blocks(content)
        if not content:
            continue
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"] = _blocks(merged[-1]["content"]) + _blocks(content)
        else:
            merged.append({"role": role, "content": content})
    return merged
