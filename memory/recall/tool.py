"""MemorySearchTool: the `search_memory` tool, scoped to the running agent."""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

from bot.core.prompts import PromptLibrary
from bot.core.tools import ToolResult
from memory.recall.search import DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_CHARS, MemorySearchService, query_problem

log = logging.getLogger(__name__)

SEARCH_TOOL = "search_memory"

_DEFINITION: dict[str, Any] = {
    "name": SEARCH_TOOL,
    "description": (
        "Search everything you were told and wrote down: earlier conversations with this user or "
        "group, and the memory files (daily notes, MEMORY.md, PROFILE.md). Use it before saying "
        "you do not know something the user may have told you before. Query with the names, words "
        "and dates (\"May 2023\") the answer would contain, in the language it was likely said in."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "maxLength": MAX_QUERY_CHARS,
                      "description": "Names, key words and dates the answer would contain."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                      "description": f"How many results (default {DEFAULT_LIMIT})."},
            "source": {"type": "string", "enum": ["all", "notes", "conversations"],
                       "description": "notes = the memory files, conversations = earlier messages."},
        },
        "required": ["query"],
    },
}


# The compact form's one-liner (mate.llm.tools: compact; bot.core.tools.compact_definitions).
SHORT_DESCRIPTIONS: dict[str, str] = {
    SEARCH_TOOL: "Search past conversations and memory files by names, words, dates.",
}


class MemorySearchTool:
    def __init__(self, service: MemorySearchService, prompts: PromptLibrary) -> None:
        self._service = service
        self._prompts = prompts

    def definitions(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(_DEFINITION)]

    def handles(self, name: str) -> bool:
        return name == SEARCH_TOOL

    async def call(self, agent_id: int, name: str, arguments: Any, *, asked_in: int | None = None) -> ToolResult:
        """Search the running agent's own data (an agentId inside `arguments` is ignored),
        leaving out the question being answered: it would always be the best hit."""
        problem = _problem(arguments)
        if problem is None and (refused := query_problem(arguments["query"])) is not None:
            problem = refused.text(self._prompts)
        if problem is not None:
            return ToolResult(json.dumps({"error": self._prompts.text("tool_bad_input", error=problem)}),
                              is_error=True)
        result = await self._service.search(agent_id, arguments["query"], arguments.get("limit", DEFAULT_LIMIT),
                                            arguments.get("source", "all"), exclude_message=asked_in)
        return ToolResult(json.dumps(result, ensure_ascii=False))


def _problem(arguments: Any) -> str | None:
    if not isinstance(arguments, dict):
        return "the input must be a JSON object"
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        return "query must be a non-empty string"
    limit = arguments.get("limit", DEFAULT_LIMIT)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        return f"limit must be an integer from 1 to {MAX_LIMIT}"
    if arguments.get("source", "all") not in ("all", "notes", "conversations"):
        return 'source must be "all", "notes" or "conversations"'
    return None
