"""Text that SQLite and every client can store and show: no lone surrogates, no NUL."""

from __future__ import annotations


def storable(text: str) -> str:
    """Lone surrogates (from a JSON "\\ud800" escape) become U+FFFD; NUL characters are dropped."""
    if not text.isascii():  # ASCII has no surrogates: skip the round trip for most texts
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text.replace("\x00", "")
