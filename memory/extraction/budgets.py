"""File budgets (characters) as reply budgets (tokens): how long a memory model's answer may get."""

from __future__ import annotations

import math
import re

# CJK ideographs, kana, hangul and full-width forms: about one token per character.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
# Other text is about 4 characters per token; 3 leaves room for markdown and JSON escapes.
_CHARS_PER_TOKEN = 3
_CJK_SHARE = 0.1


def tokens_for_chars(chars: int, locale: str, sample: str = "") -> int:
    """Tokens that `chars` characters may take: CJK locales, or files already holding CJK text,
    count one token per character."""
    cjk = locale.startswith(("zh", "ja", "ko")) or (
        bool(sample) and len(_CJK.findall(sample)) > _CJK_SHARE * len(sample))
    return chars if cjk else math.ceil(chars / _CHARS_PER_TOKEN)
