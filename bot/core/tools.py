"""The port every tool set offered to the model implements."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What goes back to the model as a tool_result block."""

    content: str
    is_error: bool = False


class ToolSet(Protocol):
    """A group of Anthropic tool definitions served by one object."""

    def definitions(self) -> list[dict[str, Any]]:
        """Anthropic tool definitions: {name, description, input_schema}."""
        ...

    def handles(self, name: str) -> bool: ...

    async def call(self, agent_id: int, name: str, arguments: Any, *, asked_in: int | None = None) -> ToolResult:
        """Run tool `name` for the running agent; errors come back as is_error results.

        `asked_in`: the id of the user message whose turn this is (a search leaves it out)."""
        ...


# The prompt a small local model reads on its first turn was 61 % tool schemas (SPEC S34):
# the compact form keeps what validates a call (names, types, required, enums, bounds) and
# drops the prose, examples and bounds (each tool checks its own input and says what is wrong).
ToolForm = Literal["full", "compact"]
_DROPPED_KEYS = frozenset({"description", "examples", "example", "title", "default",
                           "minimum", "maximum", "minLength", "maxLength"})


def compact_definitions(definitions: Sequence[dict[str, Any]], short: Mapping[str, str]) -> list[dict[str, Any]]:
    """`definitions` in the compact form: each tool's description is its one-liner in `short`
    (else its first sentence), and the schemas keep names, types, enums and required fields."""
    return [{**definition, "description": short.get(definition["name"]) or _first_sentence(
                definition.get("description", "")),
             "input_schema": _bare(definition.get("input_schema") or {"type": "object", "properties": {}})}
            for definition in definitions]


def _first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + "." if dot else text


def _bare(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_bare(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    # "properties" maps names to schemas: a property called "description" is kept.
    return {key: ({name: _bare(value) for name, value in item.items()} if key == "properties" and
                  isinstance(item, dict) else _bare(item))
            for key, item in schema.items() if key not in _DROPPED_KEYS}


class CompactTools:
    """A tool set offered in the compact form; calls go to it unchanged."""

    def __init__(self, tools: ToolSet, short: Mapping[str, str]) -> None:
        self._tools = tools
        self._definitions = compact_definitions(tools.definitions(), short)

    def definitions(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._definitions)

    def handles(self, name: str) -> bool:
        return self._tools.handles(name)

    async def call(self, agent_id: int, name: str, arguments: Any, *, asked_in: int | None = None) -> ToolResult:
        return await self._tools.call(agent_id, name, arguments, asked_in=asked_in)


def offered(tools: ToolSet, short: Mapping[str, str], form: ToolForm) -> ToolSet:
    """`tools` as the model is shown them in `form`."""
    return CompactTools(tools, short) if form == "compact" else tools
