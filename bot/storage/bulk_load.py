"""Loading many rows at once, in one transaction, for benchmarks and imports."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bot.core.errors import StorageError
from bot.storage.migrations import LATEST_VERSION
from bot.storage.search_index import merge_now
from bot.storage.search_text import FUNCTION_NAME as SPACED_FUNCTION, spaced


@dataclass(frozen=True, slots=True)
class NewAgent:
    id: int
    name: str
    create_time: str


@dataclass(frozen=True, slots=True)
class NewChatAgent:
    """The agent a chat routed `per-chat` is answered by."""

    chat_key: str
    agent_id: int
    create_time: str


@dataclass(frozen=True, slots=True)
class NewConversation:
    id: str
    agent_id: int
    channel: str
    chat_key: str
    create_time: str
    update_time: str | None = None  # None: create_time
    trigger_source: str = "channel"


@dataclass(frozen=True, slots=True)
class NewMessage:
    conversation_id: str
    role: str
    content: str
    create_time: str
    token_count: int = 0
    sender_id: str | None = None
    sender_name: str | None = None
    content_format: str = "text"


@dataclass(frozen=True, slots=True)
class NewWorkspaceFile:
    agent_id: int
    filename: str
    content: str
    create_time: str
    update_time: str | None = None  # None: create_time
    enabled: bool = False


class SqliteBulkLoader:
    """Rows written straight into a database the daemon has made (migrated to this version).

    Everything between entering and leaving is one write transaction: committed on a clean
    exit, rolled back on an exception. The schema's triggers fire for every row, so the
    search index and each conversation's counters are kept exactly as in use; this is no
    faster way around them, only without the daemon's per-statement round trips. Foreign
    keys are not checked (as on any plain sqlite3 connection): load the agents and
    conversations before what refers to them. After the commit the search tables are merged
    into one segment each, as the nightly consolidation leaves them (search_index.py).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None

    def __enter__(self) -> SqliteBulkLoader:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.create_function(SPACED_FUNCTION, 1, spaced, deterministic=True)  # the index triggers call it
            version = self._schema_version(conn)
            if version != LATEST_VERSION:
                raise StorageError(f"{self.path} is at schema version {version}, not {LATEST_VERSION}: "
                                   "open it with the daemon's Database first")
            conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
            if exc_type is None:
                merge_now(conn)  # as the nightly consolidation leaves it: one segment per search table
        finally:
            conn.close()

    @staticmethod
    def _schema_version(conn: sqlite3.Connection) -> int:
        try:
            row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
        except sqlite3.OperationalError:  # no such table: not made by the daemon
            return 0
        return int(row[0]) if row else 0

    @property
    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StorageError("the bulk loader is not open: use it in a `with` block")
        return self._conn

    def agents(self, rows: Sequence[NewAgent]) -> None:
        self._open.executemany(
            "INSERT INTO mate_agent(id, name, create_time, update_time) VALUES (?, ?, ?, ?)",
            [(r.id, r.name, r.create_time, r.create_time) for r in rows],
        )

    def chat_agents(self, rows: Sequence[NewChatAgent]) -> None:
        self._open.executemany(
            "INSERT INTO mate_chat_agent(chat_key, agent_id, create_time) VALUES (?, ?, ?)",
            [(r.chat_key, r.agent_id, r.create_time) for r in rows],
        )

    def conversations(self, rows: Sequence[NewConversation]) -> None:
        self._open.executemany(
            "INSERT INTO mate_conversation(id, agent_id, channel, chat_key, trigger_source, create_time, "
            "update_time) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(r.id, r.agent_id, r.channel, r.chat_key, r.trigger_source, r.create_time,
              r.update_time or r.create_time) for r in rows],
        )

    def messages(self, rows: Sequence[NewMessage]) -> list[int]:
        """Inserts `rows` in order; their ids, in the same order.

        Order matters: a message is indexed with the message before it in its conversation.
        """
        conn = self._open
        before = conn.execute("SELECT COALESCE(MAX(id), 0) FROM mate_message").fetchone()[0]
        conn.executemany(
            "INSERT INTO mate_message(conversation_id, role, content, token_count, sender_id, sender_name, "
            "create_time, content_format) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(r.conversation_id, r.role, r.content, r.token_count, r.sender_id, r.sender_name, r.create_time,
              r.content_format) for r in rows],
        )
        # Inside this transaction nobody else writes, and new ids only grow: every id above
        # the largest before is one of these rows, in the order they went in.
        ids = [int(row[0]) for row in conn.execute("SELECT id FROM mate_message WHERE id > ? ORDER BY id", (before,))]
        if len(ids) != len(rows):
            raise StorageError(f"inserted {len(rows)} messages but found {len(ids)} new ids")
        return ids

    def workspace_files(self, rows: Sequence[NewWorkspaceFile]) -> None:
        """Live files at version 1, without the history rows the repository's insert also writes."""
        self._open.executemany(
            "INSERT INTO mate_workspace_file(agent_id, filename, content, file_size, enabled, create_time, "
            "update_time) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(r.agent_id, r.filename, r.content, len(r.content.encode("utf-8")), int(r.enabled), r.create_time,
              r.update_time or r.create_time) for r in rows],
        )
