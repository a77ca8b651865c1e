"""Telegram's HTML parse mode as the fake Telegram server parses it: text and entities."""

from __future__ import annotations

import html
import re
from typing import Any


class BadRequestReason(Exception):
    """Raised by a method handler; answered as Telegram's 400 body, which PTB maps to BadRequest."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.description = f"Bad Request: {reason}"


def utf16_len(text: str) -> int:
    """Entity offsets are measured in UTF-16 code units, as PTB's parse_entity expects."""
    return len(text.encode("utf-16-le")) // 2


_HTML_KINDS = {
    "b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline",
    "ins": "underline", "s": "strikethrough", "strike": "strikethrough", "del": "strikethrough",
    "tg-spoiler": "spoiler", "span": "spoiler", "a": "text_link", "code": "code", "pre": "pre",
    "blockquote": "blockquote", "tg-emoji": "custom_emoji",
}  # fmt: skip
_HTML_TAG = re.compile(
    r"<(/?)([A-Za-z][\w-]*)((?:\s+[\w-]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'>]+))?)*)\s*>"
)
_HTML_ATTR = re.compile(r"([\w-]+)(?:\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s\"'>]+)))?")
_HTML_CHARREF = re.compile(r"&(?:#(\d{1,7})|#[xX]([0-9A-Fa-f]{1,6})|(lt|gt|amp|quot));")
_HTML_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}


def parse_html(source: str) -> tuple[str, list[dict[str, Any]]]:
    """Telegram's HTML parse mode: (text, entities), or BadRequestReason worded as Telegram words it."""

    def at(i: int) -> int:  # Telegram reports positions as UTF-8 byte offsets
        return len(source[:i].encode("utf-8", "surrogatepass"))

    parts: list[str] = []
    length = 0  # UTF-16 units of text so far: entity offsets count those
    stack: list[tuple[str, dict[str, Any] | None]] = []  # open tags and their entities
    entities: list[dict[str, Any]] = []
    i = 0
    while i < len(source):
        if source[i] == "<":
            m = _HTML_TAG.match(source, i)
            if m is None:
                word = source[i + 1 :].split(">", 1)[0].split(None, 1)[:1]
                raise BadRequestReason(
                    f"can't parse entities: Unsupported start tag \"{''.join(word)}\" "
                    f"at byte offset {at(i)}"
                )
            name = m.group(2).lower()
            if m.group(1):
                if not stack:
                    raise BadRequestReason(f"can't parse entities: Unexpected end tag at byte offset {at(i)}")
                top, entity = stack.pop()
                if top != name:
                    raise BadRequestReason(
                        f"can't parse entities: Unmatched end tag at byte offset {at(i)}, "
                        f'expected "</{top}>", found "</{name}>"'
                    )
                if entity is not None and length > entity["offset"]:
                    entities.append({**entity, "length": length - entity["offset"]})
            else:
                attrs = {
                    a.group(1).lower(): html.unescape(a.group(2) or a.group(3) or a.group(4) or "")
                    for a in _HTML_ATTR.finditer(m.group(3))
                }
                stack.append((name, _open_entity(name, attrs, stack, length, at(i))))
            i = m.end()
            continue
        if source[i] == "&" and (ref := _HTML_CHARREF.match(source, i)):
            dec, hexa, named = ref.groups()
            code = int(dec) if dec else int(hexa, 16) if hexa else None
            piece = _HTML_NAMED[named] if named else chr(code) if code and code <= 0x10FFFF else ref.group(0)
            i = ref.end()
        else:
            stops = (source.find("<", i + 1), source.find("&", i + 1))
            end = min((j for j in stops if j >= 0), default=len(source))
            piece, i = source[i:end], end
        parts.append(piece)
        length += utf16_len(piece)
    if stack:
        raise BadRequestReason(
            f"can't parse entities: Can't find end tag corresponding to start tag \"{stack[-1][0]}\""
        )
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return "".join(parts), entities


def _open_entity(
    name: str,
    attrs: dict[str, str],
    stack: list[tuple[str, dict[str, Any] | None]],
    offset: int,
    byte_offset: int,
) -> dict[str, Any] | None:
    """The entity a start tag opens (its length comes at the end tag); None for a plain wrapper."""
    kind = _HTML_KINDS.get(name)
    if name == "span" and attrs.get("class") != "tg-spoiler":
        kind = None
    if kind is None:
        raise BadRequestReason(
            f"can't parse entities: Unsupported start tag \"{name}\" at byte offset {byte_offset}"
        )
    entity: dict[str, Any] = {"type": kind, "offset": offset}
    if kind == "text_link":
        if not attrs.get("href"):
            return None
        entity["url"] = attrs["href"]
    elif kind == "custom_emoji":
        entity["custom_emoji_id"] = attrs.get("emoji-id", "")
    elif kind == "code" and stack and stack[-1][0] == "pre":
        # <pre><code class="language-x"> is one pre entity with a language.
        pre = stack[-1][1]
        language = attrs.get("class", "")
        if pre is not None and language.startswith("language-"):
            pre["language"] = language.removeprefix("language-")
        return None
    elif kind == "blockquote" and "expandable" in attrs:
        entity["type"] = "expandable_blockquote"
    return entity
