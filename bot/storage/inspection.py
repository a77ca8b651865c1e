"""A read-only look into a daemon's database file, for the lane scripts that check a run from outside."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import TracebackType

from bot.storage.conversations import _MESSAGE_COLUMNS, _message
from bot.storage.memory_state import _RUN_COLUMNS, _run
from bot.core.records import MemoryRunRecord, MessageRecord


class ReadOnlyDatabase:
    """The file opened read-only with plain sqlite3 (no event loop), beside a daemon that may
    still be running: in WAL mode a reader neither blocks it nor is blocked."""

    def __init__(self, path: str | Path, *, timeout: float = 10.0) -> None:
        self.path = Path(path)
        self._conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout)
        self._conn.row_factory = sqlite3.Row

    def __enter__(self) -> ReadOnlyDatabase:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    def memory_runs(self, kind: str) -> list[MemoryRunRecord]:
        """Every memory run of this kind (`summarize`, `emergence`, ...), oldest first."""
        rows = self._conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM mate_memory_run WHERE kind = ? ORDER BY id", (kind,)).fetchall()
        return [_run(r) for r in rows]

    def messages(self, conversation_id: str) -> list[MessageRecord]:
        """Every message of one conversation, oldest first."""
        rows = self._conn.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM mate_message WHERE conversation_id = ? ORDER BY id",
            (conversation_id,)).fetchall()
        return [_message(r) for r in rows]

    def note_index_rows(self) -> set[tuple[int, str]]:
        """The substring index's rows of workspace files, (key, text): what a search finds them by."""
        rows = self._conn.execute("SELECT rowid, body FROM mate_search_trigram WHERE source = 'notes'").fetchall()
        return {(int(r[0]), str(r[1])) for r in rows}
