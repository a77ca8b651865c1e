"""The text the word index stores: CJK characters one per token.

SQLite's unicode61 tokenizer reads a run of Chinese or Japanese characters as one token,
so no word inside it could be found. Spaced out, each character is a token and a
two-character word is a two-token phrase; the trigram table beside it finds longer
substrings. The function is registered on every connection the daemon opens, because
the index triggers call it.
"""

from __future__ import annotations

import re

FUNCTION_NAME = "mate_search_spaced"

# Han (incl. extension A and compatibility), kana, half-width katakana, CJK punctuation.
CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
_CJK = re.compile(f"([{CJK_CHARS}])")


def spaced(text: str | None) -> str:
    if not text:
        return ""
    return _CJK.sub(r" \1 ", text)
