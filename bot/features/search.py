"""SearchFeature: search over what an agent was told and wrote down, as the JSON result (the
API, `matebot memory search --json`) or as text lines (/memory search and the CLI alike)."""

from __future__ import annotations

from typing import Any

from bot.core.prompts import PromptLibrary
from memory.recall.search import DEFAULT_LIMIT, MemorySearchService, SearchQueryRefused


class SearchFeature:
    """Implements the chat commands' MemorySearch port; the API and the CLI call it directly."""

    def __init__(self, search: MemorySearchService, prompts: PromptLibrary) -> None:
        self._search = search
        self._prompts = prompts

    async def search(self, agent_id: int, query: str, limit: int = DEFAULT_LIMIT, source: str = "all") -> dict[str, Any]:
        """Raises SearchQueryRefused for a query the search does not run."""
        return await self._search.search(agent_id, query, limit, source)

    async def text(self, agent_id: int, query: str) -> str:
        if not query.strip():
            return self._prompts.text("search_usage")
        try:
            result = await self.search(agent_id, query)
        except SearchQueryRefused as refused:
            return refused.text(self._prompts)
        return self.lines(result)

    def lines(self, result: dict[str, Any]) -> str:
        """A search result as lines: where each hit is from, when, and its snippet."""
        t = self._prompts.text
        if not result["results"]:
            return t("search_none", query=result["query"])
        lines = [t("search_header", count=result["count"], query=result["query"])]
        for number, hit in enumerate(result["results"], 1):
            where = hit.get("filename") or t("search_conversation")
            lines.append(t("search_line", number=number, where=where, time=hit["time"][:16], snippet=hit["snippet"]))
        return "\n".join(lines)
