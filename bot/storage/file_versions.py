"""The one writer of a workspace file's versions: every change of a file's content (create,
replace, append, delete) with its history row, inside the caller's write transaction.

WorkspaceFileService's writes, a memory extraction's commit, an approved proposal and an
undo all go through here, so a version never lands without its row in
mate_workspace_file_history, and only the newest `keep` versions are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.storage.sql import Transaction

Change = Literal["extraction", "emergence", "tool", "api", "import", "undo"]
# A version recorded only when the next one is written (a seed, a file from before history
# began) is labelled `import`: where it came from is not known.
UNKNOWN_SOURCE: Change = "import"


class MovedOn(Exception):
    """The file's version moved on between the writer's read and its write: another writer came
    first (on PostgreSQL two transactions may both have read it). Nothing was written."""


async def _bump(conn: Transaction, sql: str, params: tuple[object, ...], current: int) -> None:
    """An UPDATE of the live file at version `current` only (its last two parameters: id, version)."""
    result = await conn.execute(sql + " AND version = ?", (*params, current))
    if result.rowcount != 1:
        raise MovedOn


@dataclass(frozen=True, slots=True)
class Made:
    """Who makes a version (the change and its memory run), when, and how many versions a file keeps."""

    change: Change
    run_id: int | None
    keep: int
    now: str


async def create(
    conn: Transaction, agent_id: int, filename: str, content: str, made: Made, *,
    enabled: bool, sort_order: int, if_absent: bool = False, recorded: bool = True,
) -> int | None:
    """A new live file at version 1; with `if_absent`, None when a live file of that name exists.
    Not `recorded` (a seed): history holds no row for it until it first changes, and shows its
    version from the file meanwhile (UNKNOWN_SOURCE), as for a file from before history began."""
    unless = " ON CONFLICT DO NOTHING" if if_absent else ""
    row = await conn.fetchone(
        "INSERT INTO mate_workspace_file(agent_id, filename, content, file_size, enabled, sort_order, create_time, "
        f"update_time, deleted, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 1){unless} RETURNING id",
        (agent_id, filename, content, len(content.encode("utf-8")), int(enabled), sort_order, made.now, made.now),
    )
    if row is None:
        return None
    file_id = int(row[0])
    if recorded:
        await _record(conn, file_id, previous=None, version=1, content=content, made=made)
    return file_id


async def replace(
    conn: Transaction, file_id: int, content: str, made: Made, *, current: int,
    before: tuple[str, str] | None = None,
) -> None:
    """The live file's content replaced: version `current` + 1. `before` is version `current`'s
    (content, time), kept in history when it holds no row for it yet (a seed, a file from before
    history began); None where history holds it already."""
    await _bump(conn, "UPDATE mate_workspace_file SET content = ?, file_size = ?, update_time = ?, "
                      "version = version + 1 WHERE id = ?",
                (content, len(content.encode("utf-8")), made.now, file_id), current)
    previous = (current, *before) if before is not None else None
    await _record(conn, file_id, previous=previous, version=current + 1, content=content, made=made)


async def append(conn: Transaction, file_id: int, text: str, made: Made, *, current: int) -> None:
    """`text` added at the end of a live file in SQL, its version kept as any other (the version
    before it too, when history does not hold it yet). The file's text never passes through
    here: an entry added to a long daily note costs the entry."""
    await conn.execute(
        "INSERT INTO mate_workspace_file_history(file_id, version, content, run_id, change, create_time) "
        "SELECT id, version, content, NULL, ?, update_time FROM mate_workspace_file WHERE id = ? "
        "ON CONFLICT DO NOTHING",
        (UNKNOWN_SOURCE, file_id))
    await _bump(conn, "UPDATE mate_workspace_file SET content = content || ?, file_size = file_size + ?, "
                      "update_time = ?, version = version + 1 WHERE id = ?",
                (text, len(text.encode("utf-8")), made.now, file_id), current)
    await conn.execute(
        "INSERT INTO mate_workspace_file_history(file_id, version, content, run_id, change, create_time) "
        "SELECT id, version, content, ?, ?, ? FROM mate_workspace_file WHERE id = ? "
        "ON CONFLICT(file_id, version) DO UPDATE SET content = excluded.content, run_id = excluded.run_id, "
        "change = excluded.change, create_time = excluded.create_time",
        (made.run_id, made.change, made.now, file_id))
    await _prune(conn, file_id, made.keep)


async def delete(conn: Transaction, file_id: int, made: Made, *, current: int) -> None:
    """The live file removed: version `current` + 1, empty in history."""
    await _bump(conn, "UPDATE mate_workspace_file SET deleted = 1, update_time = ?, version = version + 1 WHERE id = ?",
                (made.now, file_id), current)
    await _record(conn, file_id, previous=None, version=current + 1, content="", made=made)


async def _record(
    conn: Transaction, file_id: int, *, previous: tuple[int, str, str] | None, version: int,
    content: str, made: Made,
) -> None:
    if previous is not None:
        await conn.execute(
            "INSERT INTO mate_workspace_file_history(file_id, version, content, run_id, change, "
            "create_time) VALUES (?, ?, ?, NULL, ?, ?) ON CONFLICT DO NOTHING", (file_id, previous[0], previous[1], UNKNOWN_SOURCE,
                                                          previous[2]))
    await conn.execute(
        "INSERT INTO mate_workspace_file_history(file_id, version, content, run_id, change, create_time) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(file_id, version) DO UPDATE SET content = excluded.content, run_id = excluded.run_id, "
        "change = excluded.change, create_time = excluded.create_time", (file_id, version, content, made.run_id, made.change, made.now))
    await _prune(conn, file_id, made.keep)


async def _prune(conn: Transaction, file_id: int, keep: int) -> None:
    await conn.execute(
        "DELETE FROM mate_workspace_file_history WHERE file_id = ? AND version <= (SELECT version FROM "
        "mate_workspace_file_history WHERE file_id = ? ORDER BY version DESC LIMIT 1 OFFSET ?)",
        (file_id, file_id, max(1, keep)))
