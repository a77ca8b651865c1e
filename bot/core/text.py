"""How text is cleaned: what a person sends, what is stored, and what shows nothing at all."""

from __future__ import annotations

import re
import unicodedata

# Letters that render as nothing (Hangul fillers, Braille blank, Mongolian vowel separator),
# variation selectors and Unicode's noncharacters; everything else invisible is found by its
# category.
_INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u180e") | frozenset(
    chr(c) for c in (*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0), *range(0xFDD0, 0xFDF0),
                     *(plane * 0x10000 + low for plane in range(17) for low in (0xFFFE, 0xFFFF))))
# Controls, format characters (bidi marks, zero-width joiners), surrogates, separators, and
# combining marks (Mn, Me): a mark has no base of its own to sit on, so a message of marks
# alone shows at most a dotted circle and says nothing. Not "Cn" (unassigned): this Python's
# Unicode tables are older than the phones people type on, and a new emoji is unassigned here.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc", "Cs", "Zs", "Zl", "Zp", "Mn", "Me"})
_ASCII_INVISIBLE = "".join(map(chr, (*range(0x21), 0x7F)))  # space and the C0 controls, DEL
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # C0 and DEL, but tab and newlines


def clean_text(text: str) -> str:
    """What a person sent (a message, a name, an id), as the bot takes it in: lone surrogates
    become U+FFFD and C0 controls (but tab and newlines) are dropped."""
    return _CONTROLS.sub("", _whole_characters(text))


def storable(text: str) -> str:
    """What a model or tool wrote, as it is stored: lone surrogates (from a JSON "\\ud800"
    escape) become U+FFFD; NUL characters are dropped, other controls kept as written."""
    return _whole_characters(text).replace("\x00", "")


def _whole_characters(text: str) -> str:
    """Lone surrogates become U+FFFD: SQLite, JSON encoders and sockets refuse them."""
    if not text.isascii():  # ASCII has no surrogates: skip the round trip for most texts
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def is_blank(text: str) -> bool:
    """Nothing a person could read: whitespace, controls, zero-width characters and lone marks only."""
    if text.isascii():
        return not text.strip(_ASCII_INVISIBLE)
    return all(ch.isspace() or ch in _INVISIBLE_LETTERS or unicodedata.category(ch) in _INVISIBLE_CATEGORIES
               for ch in text)


def led_by(lead: str, text: str) -> str:
    """`text` opened by `lead` and a blank line (a notice before a reply), or `text` alone."""
    return f"{lead}\n\n{text}" if lead else text


def last_chars(text: str, limit: int) -> tuple[str, int]:
    """The last `limit` characters of `text`, from a line start when one is near; (tail, omitted)."""
    if len(text) <= limit:
        return text, 0
    tail = text[len(text) - limit:]
    newline = tail.find("\n")
    if 0 <= newline < limit // 2:
        tail = tail[newline + 1:]
    return tail, len(text) - len(tail)
