"""safe(): a model's answer with every string made storable (lone surrogates replaced), whatever the protocol."""

from __future__ import annotations

from typing import Any

from bot.core.text import storable


def safe(value: Any) -> Any:
    """`value` with every string made storable (lone surrogates replaced), however nested."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable(str(k)): safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [safe(v) for v in value]
    return value
