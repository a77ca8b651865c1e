"""The port every tool set offered to the model implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


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
