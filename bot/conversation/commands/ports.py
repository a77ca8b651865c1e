"""What the slash commands ask of the feature services above them (bot/features implements
these ports, bot/app wires them in): the commands own them, so they import nothing upwards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.core.records import WorkspaceFileRecord
from memory.trust.history import Quotable, UndoResult


@dataclass(frozen=True, slots=True)
class ShownFile:
    """A memory file as /memory show prints it ("" when the file is missing)."""

    filename: str
    content: str


class MemoryFiles(Protocol):
    """/memory show, history and why, /undo, and the files /status counts."""

    async def files(self, agent_id: int, prefix: str = "") -> list[WorkspaceFileRecord]: ...

    async def show(self, agent_id: int, which: str) -> ShownFile | None:
        """`which` is "profile", "memory" or "today"; None for any other name."""
        ...

    async def history(self, agent_id: int, filename: str | None = None) -> str: ...

    async def why(self, agent_id: int, text: str, quotable: Quotable | None = None) -> str: ...

    async def undo(self, agent_id: int, chat_key: str) -> UndoResult: ...


class MemorySearch(Protocol):
    """/memory search: the answer as chat lines (the usage line for a blank query)."""

    async def text(self, agent_id: int, query: str) -> str: ...
