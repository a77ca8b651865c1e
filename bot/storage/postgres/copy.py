"""A SQLite database copied into an empty PostgreSQL one (`matebot migrate --to postgresql://…`).

Every table of what people said and what matebot keeps is copied row for row, ids kept:
agents, conversations and messages (and the facts taken from them), people, workspace files and their history, memory runs and
proposals, tasks, usage, incognito marks and the messages' vectors. What PostgreSQL derives
itself is rebuilt there rather than copied: the search index (its own tables and triggers),
the pieces workspace files are indexed in (SQLite counts them in bytes, PostgreSQL in
characters) and so the vectors of those pieces, which the backfill makes again.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot.core.errors import StorageError
from bot.storage.postgres.database import PostgresDatabase

import asyncpg

# In the order their references need; each with the columns both schemas hold.
TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("mate_agent", ("id", "name", "create_time", "update_time")),
    ("mate_chat_agent", ("chat_key", "agent_id", "create_time")),
    ("mate_person", ("id", "name", "create_time")),
    ("mate_person_account", ("channel", "sender_id", "person_id", "source")),
    ("mate_conversation", ("id", "agent_id", "channel", "chat_key", "title", "trigger_source", "summary",
                           "summary_upto_message_id", "memory_upto_message_id", "create_time", "update_time",
                           "archived", "message_count", "is_group", "rowid")),
    ("mate_message", ("id", "conversation_id", "role", "content", "token_count", "sender_id", "sender_name",
                      "create_time", "content_format", "external_id")),
    ("mate_message_fact", ("id", "message_id", "fact", "run_id", "create_time")),
    ("mate_incognito", ("conversation_id", "after_message_id", "start_time")),
    ("mate_workspace_file", ("id", "agent_id", "filename", "content", "file_size", "enabled", "sort_order",
                             "create_time", "update_time", "deleted", "version")),
    ("mate_workspace_file_history", ("file_id", "version", "content", "run_id", "change", "create_time")),
    ("mate_memory_run", ("id", "agent_id", "kind", "conversation_id", "status", "reason", "started", "finished",
                         "error")),
    ("mate_memory_pending", ("conversation_id", "agent_id", "upto_message_id", "trigger_source", "attempts",
                             "due_time", "last_error", "create_time")),
    ("mate_memory_proposal", ("id", "agent_id", "filename", "base_version", "content", "reason", "run_id", "status",
                              "create_time", "expire_time")),
    ("mate_cron_job", ("id", "agent_id", "name", "cron_expression", "timezone", "task_type", "trigger_message",
                       "enabled", "last_run_time", "next_run_time", "create_time", "update_time", "target_channel",
                       "target_chat_id", "target_thread_id", "run_at", "created_by", "created_by_name",
                       "missed_time", "target_place_id")),
    ("mate_llm_usage", ("id", "agent_id", "conversation_id", "purpose", "model", "input_tokens",
                        "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens", "create_time")),
    ("mate_embedding", ("key", "model", "agent_id", "dim", "vector", "norm", "create_time")),
)
# Rows left out on purpose: the vectors of file pieces (key odd), whose pieces are rebuilt.
_WHERE = {"mate_embedding": "key % 2 = 0"}
_IDENTITY = ("mate_conversation", "mate_message", "mate_message_fact", "mate_workspace_file", "mate_memory_run",
             "mate_memory_proposal", "mate_cron_job", "mate_llm_usage")
_DERIVED_TRIGGERS = ("mate_message", "mate_message_fact", "mate_workspace_file")
_BATCH = 5_000


@dataclass(frozen=True, slots=True)
class TableCopied:
    table: str
    source_rows: int
    target_rows: int


def _where(table: str) -> str:
    return f" WHERE {_WHERE[table]}" if table in _WHERE else ""


def _source_rows(source: sqlite3.Connection, table: str, columns: tuple[str, ...]) -> sqlite3.Cursor:
    return source.execute(f"SELECT {', '.join(columns)} FROM {table}{_where(table)} ORDER BY 1")


async def copy_sqlite(source_path: Path, target: PostgresDatabase,
                      progress: Callable[[str], None] = lambda _: None) -> list[TableCopied]:
    """Copy every table; the counts of each: rows read from SQLite, rows found in PostgreSQL after. The target must hold no rows."""
    source = sqlite3.connect(f"{source_path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        async with target.pool.acquire() as conn:
            await _refuse_unless_empty(conn)
            async with conn.transaction():
                for table in _DERIVED_TRIGGERS:  # rebuilt in bulk below, not row by row
                    await conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
                read: dict[str, int] = {}  # rows read from each SQLite table, under its lock
                for table, columns in TABLES:
                    started = time.monotonic()
                    cursor = _source_rows(source, table, columns)
                    copied = 0
                    try:
                        while batch := cursor.fetchmany(_BATCH):
                            await conn.copy_records_to_table(table, records=batch, columns=list(columns))
                            copied += len(batch)
                    except (asyncpg.PostgresError, asyncpg.DataError) as exc:
                        raise StorageError(f"copying {table} (after {copied} rows): {exc}") from exc
                    progress(f"{table}: {copied} rows ({time.monotonic() - started:.1f} s)")
                    read[table] = copied
                for table in _DERIVED_TRIGGERS:
                    await conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
                for table in _IDENTITY:
                    # Where SQLite handed out ids up to: those of rows deleted since are not given again.
                    handed = source.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
                    column = "rowid" if table == "mate_conversation" else "id"
                    await conn.execute(
                        f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                        f"GREATEST((SELECT MAX({column}) FROM {table}), $1, 1))", int(handed[0]) if handed else 0)
                started = time.monotonic()
                await conn.execute("SELECT mate_search_rebuild()")
                progress(f"search index rebuilt ({time.monotonic() - started:.1f} s)")
            return [TableCopied(table, read[table], await _target_rows(conn, table)) for table, _ in TABLES]
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read {source_path}: {exc}") from exc
    finally:
        source.close()


async def _refuse_unless_empty(conn: asyncpg.Connection) -> None:
    for table, _ in TABLES:
        if await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {table})"):
            raise StorageError(f"the target database already holds rows ({table}): migrate copies into an empty one")


async def _target_rows(conn: asyncpg.Connection, table: str) -> int:
    return int(await conn.fetchval(f"SELECT COUNT(*) FROM {table}{_where(table)}"))
