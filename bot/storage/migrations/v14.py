"""Version 14: workspace files are indexed in pieces: an append indexes only the text it adds."""

from __future__ import annotations

from bot.storage.search_schema import PIECES

VERSION = 14
DESCRIPTION = "workspace files are indexed in pieces: an append indexes only the text it adds"
STATEMENTS: tuple[str, ...] = PIECES
