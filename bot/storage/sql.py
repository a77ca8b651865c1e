"""What a repository asks of its database, whichever backend holds it (SQLite or PostgreSQL).

Repositories write one SQL text for both: `?` placeholders, `ON CONFLICT` instead of
`INSERT OR …`, `RETURNING id` where the new id is needed. The PostgreSQL side numbers the
placeholders itself (bot/storage/postgres/database.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import aiosqlite


class Row(Protocol):
    """A result row, read by position or by column name (sqlite3.Row, asyncpg.Record)."""

    def __getitem__(self, key: Any, /) -> Any: ...

    def keys(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class WriteResult:
    lastrowid: int  # SQLite only; write `RETURNING id` where both backends must know it
    rowcount: int


class Transaction(Protocol):
    """Statements inside one write transaction, in order, committed together."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> WriteResult: ...

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    async def serialize(self, name: str) -> None:
        """Until this transaction ends, any other that serializes on `name` waits: a read-then-write
        (the next free id, a count under a limit) stays whole with several writers. SQLite's write
        transactions are one at a time already."""


class SqlDatabase(Protocol):
    """The storage a repository is given: single-statement writes, reads, transactions."""

    backend: str  # "sqlite" | "postgresql": for the few statements the two write differently

    def now(self) -> str: ...

    def transaction(self) -> AbstractAsyncContextManager[Transaction]: ...

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> WriteResult: ...

    async def write_returning(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

    def queue_returning(self, sql: str, params: Sequence[Any] = ()) -> asyncio.Future[list[Any]]: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any | None: ...


class SqliteTransaction:
    """A Transaction on the SQLite writer connection (inside its BEGIN IMMEDIATE)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> WriteResult:
        cursor = await self._conn.execute(sql, params)
        return WriteResult(cursor.lastrowid or 0, cursor.rowcount)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self._conn.executemany(sql, rows)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        async with self._conn.execute(sql, params) as cursor:
            row: Row | None = await cursor.fetchone()
            return row

    async def serialize(self, name: str) -> None:
        return None  # BEGIN IMMEDIATE: one write transaction at a time
