"""SQLite connections (one writer, one reader) in WAL mode, migrated on open."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any

import aiosqlite

from bot.errors import StorageError
from bot.storage.migrations import MIGRATIONS

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WriteResult:
    lastrowid: int
    rowcount: int


def _write(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> WriteResult:
    cursor = conn.execute(sql, params)
    try:
        return WriteResult(cursor.lastrowid or 0, cursor.rowcount)
    finally:
        cursor.close()


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Database:
    """Owns the SQLite file: writes are serialised on one connection, reads use another."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()

    async def __aenter__(self) -> Database:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = await self._connect()
            await self._writer.execute("PRAGMA journal_mode=WAL")
            await self._migrate()
            self._reader = await self._connect()
        except (OSError, aiosqlite.Error) as exc:
            await self.close()
            raise StorageError(f"cannot open database {self.path}: {exc}") from exc

    async def _connect(self) -> aiosqlite.Connection:
        # isolation_level=None: we issue BEGIN IMMEDIATE ourselves so a transaction is explicit.
        conn = await aiosqlite.connect(self.path, isolation_level=None)
        conn.row_factory = aiosqlite.Row
        await conn.execute("PRAGMA foreign_keys=ON")
        await conn.execute("PRAGMA busy_timeout=10000")
        await conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    async def close(self) -> None:
        for conn in (self._reader, self._writer):
            if conn is not None:
                await conn.close()
        self._reader = self._writer = None

    async def _migrate(self) -> None:
        assert self._writer is not None
        await self._writer.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
            "description TEXT NOT NULL, applied_time TEXT NOT NULL)"
        )
        async with self._writer.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version") as cur:
            row = await cur.fetchone()
        current = int(row[0]) if row else 0
        for version, description, statements in MIGRATIONS:
            if version <= current:
                continue
            await self._writer.execute("BEGIN IMMEDIATE")
            try:
                for statement in statements:
                    await self._writer.execute(statement)
                await self._writer.execute(
                    "INSERT INTO schema_version(version, description, applied_time) VALUES (?, ?, ?)",
                    (version, description, utc_now()),
                )
                await self._writer.execute("COMMIT")
            except BaseException:
                await self._writer.execute("ROLLBACK")
                raise
            log.info("database migrated to version %s (%s)", version, description)

    @property
    def writer(self) -> aiosqlite.Connection:
        if self._writer is None:
            raise StorageError("database is not open")
        return self._writer

    # Single statements need no lock: aiosqlite runs a connection's calls in the order they
    # were queued, and queueing happens before the first await. Only an explicit
    # transaction holds the lock, so no statement is queued between its BEGIN and COMMIT;
    # a statement arriving meanwhile waits for the lock.

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction at a time; rolled back if the block raises."""
        async with self._write_lock:
            conn = self.writer
            await conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                await conn.execute("ROLLBACK")
                raise
            await conn.execute("COMMIT")

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> WriteResult:
        """A single-statement write (its own transaction), in one trip to the writer's thread."""
        writer = self.writer
        # aiosqlite's public execute() costs two thread hops (run, then close the cursor);
        # its _execute runs one function on the connection's thread.
        if not self._write_lock.locked():
            return await writer._execute(_write, writer._conn, sql, params)
        async with self._write_lock:
            return await writer._execute(_write, writer._conn, sql, params)

    async def write_returning(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """A single-statement write with RETURNING, read back in the same call."""
        if not self._write_lock.locked():
            return list(await self.writer.execute_fetchall(sql, params))
        async with self._write_lock:
            return list(await self.writer.execute_fetchall(sql, params))

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        async with self.transaction() as conn:
            await conn.executemany(sql, rows)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[aiosqlite.Row]:
        if self._reader is None:
            raise StorageError("database is not open")
        # One call on the reader's thread: a cursor left open across awaits would pin an old
        # WAL snapshot for every other read interleaved with it.
        return list(await self._reader.execute_fetchall(sql, params))

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> aiosqlite.Row | None:
        if self._reader is None:
            raise StorageError("database is not open")
        rows = await self._reader.execute_fetchall(sql, params)
        return next(iter(rows), None)

    async def schema_version(self) -> int:
        row = await self.fetchone("SELECT COALESCE(MAX(version), 0) FROM schema_version")
        return int(row[0]) if row else 0
