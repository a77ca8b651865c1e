"""SQL for the all-or-nothing write of one memory extraction (SPEC S19)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.storage.conversations import WATERMARK_FORWARD
from bot.storage.facts import FactLink, link_facts
from bot.storage.sql import Transaction

from bot.core.errors import VersionConflict
from bot.storage.sql import SqlDatabase
import bot.storage.file_versions as file_versions
from bot.storage.file_versions import Made


@dataclass(frozen=True, slots=True)
class FileWrite:
    """A workspace file's new content, valid only while the file is at `expected_version`.

    expected_version 0 means the file must not exist yet: it is created with `enabled`
    and `sort_order`; otherwise those two stay as they are.
    """

    filename: str
    content: str
    expected_version: int
    enabled: bool = False
    sort_order: int = 100
    # Set when the write only adds this text at the end (content is the file with it): it is
    # appended in SQL, and only it is indexed.
    appended: str = ""


@dataclass(frozen=True, slots=True)
class ExtractionCommit:
    agent_id: int
    conversation_id: str
    files: Sequence[FileWrite]
    watermark: int  # the conversation's memory_upto_message_id afterwards
    run_id: int  # the mate_memory_run row this attempt started
    run_status: str
    run_reason: str
    history_versions: int = 50  # versions kept per file (mate.memory.history-versions)
    facts: Sequence[FactLink] = ()  # the daily entry's lines, each with the message it came from


class MemoryCommitRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def commit(self, change: ExtractionCommit) -> None:
        """Files, watermark, pending completion and run row in one transaction.

        A file no longer at its expected version raises VersionConflict and nothing at all
        is written, so a retry never appends the same daily entry twice.
        """
        now = self._db.now()
        async with self._db.transaction() as conn:
            for write in change.files:
                await _write_file(conn, change, write, now)
            await link_facts(conn, change.facts, now, change.run_id)
            await conn.execute(
                f"UPDATE mate_conversation SET memory_upto_message_id = {WATERMARK_FORWARD}, update_time = ? "
                "WHERE id = ?",
                (change.watermark, change.watermark, now, change.conversation_id),
            )
            await conn.execute(
                "DELETE FROM mate_memory_pending WHERE conversation_id = ? AND upto_message_id <= ?",
                (change.conversation_id, change.watermark),
            )
            await conn.execute(
                "UPDATE mate_memory_run SET status = ?, reason = ?, error = NULL, finished = ? WHERE id = ?",
                (change.run_status, change.run_reason, now, change.run_id),
            )


async def _write_file(conn: Transaction, change: ExtractionCommit, write: FileWrite, now: str) -> None:
    """One file's new content, and its version in the file's history (the one before it too,
    when history does not hold it yet)."""
    agent_id = change.agent_id
    # An append needs neither the file's text nor its time: it is added in SQL.
    before = "NULL, NULL" if write.appended else "content, update_time"
    row = await conn.fetchone(
        f"SELECT id, version, {before} FROM mate_workspace_file WHERE agent_id = ? AND filename = ? AND deleted = 0",
        (agent_id, write.filename),
    )
    current = int(row[1]) if row else 0
    if current != write.expected_version:
        raise VersionConflict(write.filename, write.expected_version, current)
    made = Made("extraction", change.run_id, change.history_versions, now)
    try:
        if row is None:
            created = await file_versions.create(conn, agent_id, write.filename, write.content, made,
                                                 enabled=write.enabled, sort_order=write.sort_order, if_absent=True)
            if created is None:  # made meanwhile by another writer (PostgreSQL: two transactions at once)
                raise file_versions.MovedOn
        elif write.appended:
            await file_versions.append(conn, int(row[0]), write.appended, made, current=current)
        else:
            await file_versions.replace(conn, int(row[0]), write.content, made, current=current,
                                        before=(str(row[2]), str(row[3])))
    except file_versions.MovedOn:  # written meanwhile by another writer: as a version that moved on
        raise VersionConflict(write.filename, write.expected_version, write.expected_version + 1) from None
