"""The text the word index stores: CJK characters one per token.

SQLite's unicode61 tokenizer reads a run of Chinese or Japanese characters as one token,
so no word inside it could be found. Spaced out, each character is a token and a
two-character word is a two-token phrase; the trigram table beside it finds longer
substrings. The function is registered on every connection the daemon opens, because
the index triggers call it.
"""

from __future__ import annotations

import re
import unicodedata

FUNCTION_NAME = "mate_search_spaced"

# Kana, Han (incl. extension A and compatibility) and Hangul syllables: scripts whose
# words are not separated by spaces, or carry their particles attached (Korean).
CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK = re.compile(f"([{CJK_CHARS}])")


def normalised(text: str) -> str:
    """Full-width letters and digits as plain ones (ｉＰｈｏｎｅ is iPhone), and text that
    cannot be encoded (lone surrogates) made safe."""
    text = unicodedata.normalize("NFKC", text)
    return text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text


def spaced(text: str | None) -> str:
    if not text:
        return ""
    return _CJK.sub(r" \1 ", normalised(text))
