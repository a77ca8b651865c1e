"""Version 11: word searches find an agent's rows through a table of index keys (mate_search_scope)."""

from __future__ import annotations

from bot.storage.search_schema import SEARCH_SCOPE

VERSION = 11
DESCRIPTION = "word searches find an agent's rows through a table of index keys (mate_search_scope)"
STATEMENTS: tuple[str, ...] = SEARCH_SCOPE
