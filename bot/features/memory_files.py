"""MemoryFilesFeature: an agent's memory files listed, read, shown, their history, why a line is
there, and /undo — one service for the chat commands, the HTTP API and the CLI."""

from __future__ import annotations

from dataclasses import dataclass

from bot.conversation.commands.ports import ShownFile
from bot.core.clock import local_date
from bot.core.records import WorkspaceFileRecord
from bot.storage.file_history import FileVersion, FileHistoryRepository
from memory.trust.history import MemoryHistoryService, Quotable, UndoResult
from memory.workspace.service import MEMORY_FILE, PROFILE_FILE, WorkspaceFileService, daily_note_name


@dataclass(frozen=True, slots=True)
class FileVersions:
    """A file as it is now and its kept versions, the newest first."""

    file: WorkspaceFileRecord
    versions: list[FileVersion]


class MemoryFilesFeature:
    """Implements the chat commands' MemoryFiles port; the API and the CLI call it directly."""

    def __init__(self, workspace: WorkspaceFileService, file_history: FileHistoryRepository,
                 history: MemoryHistoryService, timezone: str) -> None:
        self._workspace = workspace
        self._file_history = file_history
        self._history = history
        self._timezone = timezone

    async def files(self, agent_id: int, prefix: str = "") -> list[WorkspaceFileRecord]:
        return await self._workspace.list(agent_id, prefix)

    async def read(self, agent_id: int, filename: str) -> WorkspaceFileRecord | None:
        return await self._workspace.get(agent_id, filename)

    async def show(self, agent_id: int, which: str) -> ShownFile | None:
        # "today" is read on the local calendar: a note written after midnight UTC but before
        # local midnight is still yesterday's.
        names = {"profile": PROFILE_FILE, "memory": MEMORY_FILE, "today": daily_note_name(local_date(self._timezone))}
        filename = names.get(which)
        if filename is None:
            return None
        content, _ = await self._workspace.read_text(agent_id, filename)
        return ShownFile(filename, content)

    async def versions(self, agent_id: int, filename: str) -> FileVersions | None:
        """None when the agent has no such file."""
        found = await self._workspace.get(agent_id, filename)
        if found is None:
            return None
        return FileVersions(found, await self._file_history.versions(found.id, self._workspace.history_versions))

    async def history(self, agent_id: int, filename: str | None = None) -> str:
        return await self._history.lines(agent_id, filename)

    async def why(self, agent_id: int, text: str, quotable: Quotable | None = None) -> str:
        return await self._history.why(agent_id, text, quotable)

    async def undo(self, agent_id: int, chat_key: str) -> UndoResult:
        return await self._history.undo(agent_id, chat_key)
