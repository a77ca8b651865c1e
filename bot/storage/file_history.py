"""SQL for mate_workspace_file_history: each version of a workspace file, who made it, and the undo of a run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


from bot.core.errors import VersionConflict
import bot.storage.file_versions as file_versions
from bot.storage.facts import unlink_run
from bot.storage.sql import SqlDatabase
from bot.storage.file_versions import UNKNOWN_SOURCE, Made



@dataclass(frozen=True, slots=True)
class FileVersion:
    """Version `version` of a file: its content, and the change (and memory run) that made it."""

    file_id: int
    filename: str
    version: int
    content: str
    run_id: int | None
    change: str
    create_time: str


@dataclass(frozen=True, slots=True)
class RunChange:
    """A file a memory run changed: the version it made, the one before, and the file's version now."""

    file_id: int
    filename: str
    made_version: int
    previous: FileVersion | None  # None: the run created the file
    current_version: int | None  # None: the file was deleted since


_VERSION_COLUMNS = "h.file_id, f.filename, h.version, h.content, h.run_id, h.change, h.create_time"


def _kept_versions(where: str) -> str:
    """The history rows of the files `where` picks (a condition on `f`, its parameters given twice),
    and each live one's current version when history holds no row for it yet (a seed, a file from
    before history began): as record_version will keep it once the file next changes."""
    return (f"SELECT {_VERSION_COLUMNS} FROM mate_workspace_file_history h JOIN mate_workspace_file f "
            f"ON f.id = h.file_id WHERE {where} UNION ALL "
            f"SELECT f.id, f.filename, f.version, f.content, NULL, '{UNKNOWN_SOURCE}', f.update_time "
            f"FROM mate_workspace_file f WHERE {where} AND f.deleted = 0 AND NOT EXISTS (SELECT 1 FROM "
            "mate_workspace_file_history h WHERE h.file_id = f.id AND h.version = f.version)")


def _version(row: Any) -> FileVersion:
    return FileVersion(file_id=row[0], filename=row[1], version=row[2], content=row[3], run_id=row[4],
                       change=row[5], create_time=row[6])


class FileHistoryRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def versions(self, file_id: int, limit: int = 50) -> list[FileVersion]:
        """The file's kept versions, the newest first (its current one even before it first changed)."""
        rows = await self._db.fetchall(
            f"SELECT * FROM ({_kept_versions('f.id = ?')}) AS kept ORDER BY version DESC LIMIT ?", (file_id, file_id, limit))
        return [_version(r) for r in rows]

    async def version(self, file_id: int, version: int) -> FileVersion | None:
        row = await self._db.fetchone(
            f"SELECT {_VERSION_COLUMNS} FROM mate_workspace_file_history h JOIN mate_workspace_file f "
            "ON f.id = h.file_id WHERE h.file_id = ? AND h.version = ?", (file_id, version))
        return _version(row) if row else None

    async def recent(self, agent_id: int, limit: int, filename: str | None = None) -> list[FileVersion]:
        """The latest versions of the agent's live files (of one file, when named), the newest first;
        a file that never changed counts with its current version."""
        where = "f.agent_id = ? AND f.deleted = 0"
        params: list[Any] = [agent_id]
        if filename is not None:
            where += " AND f.filename = ?"
            params.append(filename)
        rows = await self._db.fetchall(
            f"SELECT * FROM ({_kept_versions(where)}) AS kept ORDER BY create_time DESC, file_id, version DESC LIMIT ?",
            [*params, *params, limit])
        return [_version(r) for r in rows]

    async def oldest_containing(self, agent_id: int, text: str, filenames: Sequence[str] = ()) -> FileVersion | None:
        """The oldest kept version of one of the agent's live files whose content holds `text`
        (case-insensitive for ASCII letters); a file that never changed counts with its current version."""
        where = "f.agent_id = ? AND f.deleted = 0"
        params: list[Any] = [agent_id]
        if filenames:
            where += f" AND f.filename IN ({', '.join('?' for _ in filenames)})"
            params += list(filenames)
        row = await self._db.fetchone(
            f"SELECT * FROM ({_kept_versions(where)}) AS kept WHERE instr(lower(content), lower(?)) > 0 "
            "ORDER BY create_time, substr(filename, 1, 7) = 'memory/', version LIMIT 1", [*params, *params, text])
        return _version(row) if row else None

    async def has_version(self, file_id: int, version: int) -> bool:
        row = await self._db.fetchone(
            "SELECT 1 FROM mate_workspace_file_history WHERE file_id = ? AND version = ?", (file_id, version))
        return row is not None

    async def run_changes(self, run_id: int) -> list[RunChange]:
        """The files a run changed (excluding an undo's own versions)."""
        rows = await self._db.fetchall(
            "SELECT h.file_id, f.filename, h.version, CASE WHEN f.deleted = 0 THEN f.version END "
            "FROM mate_workspace_file_history h JOIN mate_workspace_file f ON f.id = h.file_id "
            "WHERE h.run_id = ? AND h.change <> 'undo' ORDER BY f.filename", (run_id,))
        found: list[RunChange] = []
        for row in rows:
            before = await self._db.fetchone(
                f"SELECT {_VERSION_COLUMNS} FROM mate_workspace_file_history h JOIN mate_workspace_file f "
                "ON f.id = h.file_id WHERE h.file_id = ? AND h.version < ? ORDER BY h.version DESC LIMIT 1",
                (row[0], row[2]))
            found.append(RunChange(row[0], row[1], row[2], _version(before) if before else None, row[3]))
        return found

    async def last_chat_run(self, chat_key: str, agent_id: int) -> int | None:
        """The newest extraction run of a chat (any of its conversations with this agent) that changed a file."""
        row = await self._db.fetchone(
            "SELECT MAX(h.run_id) FROM mate_workspace_file_history h JOIN mate_memory_run r ON r.id = h.run_id "
            "JOIN mate_conversation c ON c.id = r.conversation_id WHERE c.chat_key = ? AND r.agent_id = ? "
            "AND h.change = 'extraction'", (chat_key, agent_id))
        return int(row[0]) if row and row[0] is not None else None

    async def was_undone(self, run_id: int) -> bool:
        row = await self._db.fetchone(
            "SELECT 1 FROM mate_workspace_file_history WHERE run_id = ? AND change = 'undo' LIMIT 1", (run_id,))
        return row is not None

    async def undo(self, run_id: int, changes: Sequence[RunChange], keep: int) -> None:
        """Every file back to the version before the run, in one transaction; a file that changed
        since the run raises VersionConflict and nothing is written. The undo's versions carry
        the undone run's id."""
        now = self._db.now()
        async with self._db.transaction() as conn:
            await unlink_run(conn, run_id)  # what the run found in the messages goes with what it wrote
            for change in changes:
                row = await conn.fetchone(
                    "SELECT version, content FROM mate_workspace_file WHERE id = ? AND deleted = 0",
                    (change.file_id,),
                )
                if row is None or int(row[0]) != change.made_version:
                    raise VersionConflict(change.filename, change.made_version, int(row[0]) if row else 0)
                made = Made("undo", run_id, keep, now)
                try:
                    if change.previous is None and change.made_version == 1:  # the run created it: it goes
                        await file_versions.delete(conn, change.file_id, made, current=int(row[0]))
                        continue
                    if change.previous is None:  # the version before is no longer kept
                        raise VersionConflict(change.filename, change.made_version - 1, 0)
                    await file_versions.replace(conn, change.file_id, change.previous.content, made,
                                                current=int(row[0]))
                except file_versions.MovedOn:  # changed meanwhile by another writer
                    raise VersionConflict(change.filename, change.made_version, change.made_version + 1) from None
