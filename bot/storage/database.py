"""SQLite connections (one writer, one reader, one for reads done together) in WAL mode, migrated on open."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import stat
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from bot.core.clock import Clock, iso
from bot.core.clock import utc_now as clock_now
from bot.core.errors import StorageError
from bot.core.lifecycle import AsyncResource
from bot.storage.sql import SqliteTransaction, Transaction, WriteResult
from bot.storage.search_text import FUNCTION_NAME as SPACED_FUNCTION, spaced
from bot.storage.migrations import LATEST_VERSION, MIGRATIONS, newer_schema_message

log = logging.getLogger(__name__)

# The page cache of the connection searches read through (read_together): SQLite's default
# (2 MiB) is less than what one word search reads at 100 000 messages (the word index's
# pages, each match's docsize and scope rows), so every search read them again from the OS
# (bench.recall: p50 and p95 12-15 % slower).
READER_CACHE_MIB = 32

T = TypeVar("T")


@dataclass(slots=True)
class _QueuedWrite:
    sql: str
    params: tuple[Any, ...]
    returning: bool
    future: asyncio.Future[Any]


def _run_one(conn: sqlite3.Connection, item: _QueuedWrite) -> Any:
    cursor = conn.execute(item.sql, item.params)
    try:
        if item.returning:
            return cursor.fetchall()
        return WriteResult(cursor.lastrowid or 0, cursor.rowcount)
    finally:
        cursor.close()


def _write_batch(conn: sqlite3.Connection, batch: list[_QueuedWrite]) -> list[tuple[bool, Any]]:
    """Runs on the group-commit thread: the whole batch in one transaction.

    Should a statement fail, the batch is rolled back and each statement is run again in
    its own transaction, so one failure fails only its caller. Failures are rare (a
    constraint, a full disk), so the common path pays no per-statement savepoint.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        outcomes: list[tuple[bool, Any]] = [(True, _run_one(conn, item)) for item in batch]
        conn.execute("COMMIT")
        return outcomes
    except sqlite3.Error:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return [_run_alone(conn, item) for item in batch]


def _run_alone(conn: sqlite3.Connection, item: _QueuedWrite) -> tuple[bool, Any]:
    """One statement in autocommit mode: it is its own transaction."""
    try:
        return True, _run_one(conn, item)
    except sqlite3.Error as exc:
        return False, exc


async def _write_alone(conn: aiosqlite.Connection, item: _QueuedWrite) -> list[tuple[bool, Any]]:
    """A batch of one, through aiosqlite itself: one hop, in autocommit mode (its own
    transaction), as cheap as any aiosqlite call."""
    try:
        if item.returning:
            return [(True, list(await conn.execute_fetchall(item.sql, item.params)))]
        # A statement without result rows is finished and reset when execute returns: the
        # cursor holds nothing, and closing it would cost a second hop.
        cursor = await conn.execute(item.sql, item.params)
        return [(True, WriteResult(cursor.lastrowid or 0, cursor.rowcount))]
    except sqlite3.Error as exc:
        return [(False, exc)]


async def _write_together(
    thread: ThreadPoolExecutor, conn: sqlite3.Connection, batch: list[_QueuedWrite],
) -> list[tuple[bool, Any]]:
    """A batch of several: _write_batch in one hop to the group-commit thread.

    A batch that has started runs to its end whatever becomes of its caller, so a cancelled
    caller waits for that end: the write lock it holds must not be let go while the
    batch's transaction is open (aiosqlite's thread would begin the next one inside it)."""
    work = thread.submit(_write_batch, conn, batch)
    try:
        return await asyncio.wrap_future(work)
    except asyncio.CancelledError:
        await asyncio.wait([asyncio.wrap_future(work)])  # at once if it had not started
        raise


def _in_one_snapshot(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    conn.execute("BEGIN")  # deferred: the snapshot is taken by the first read
    try:
        return work(conn)
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


async def _underlying(conn: aiosqlite.Connection) -> sqlite3.Connection:
    """The sqlite3 connection an aiosqlite one drives (its cursors' public `connection`)."""
    async with conn.cursor() as cursor:
        return cursor.connection


def keep_private(database: Path) -> None:
    """The database's folder 0700 and its files 0600, also when an older version made them.

    New files get these modes from the process's umask (set by the command line); this
    tightens what was made before. Only what this user owns is changed, and never a shared
    folder such as /tmp (sticky) or the home folder, should the database be put there."""
    folder = database.parent
    try:
        info = folder.stat()
        loose = stat.S_IMODE(info.st_mode) & 0o077
        if loose and info.st_uid == os.geteuid() and not info.st_mode & stat.S_ISVTX and not _is_home(folder):
            folder.chmod(0o700)
            log.info("made %s private to its owner (it was %o)", folder, stat.S_IMODE(info.st_mode))
        for suffix in ("", "-wal", "-shm", "-journal", ".lock"):
            path = database.with_name(database.name + suffix)
            if path.exists() and stat.S_IMODE(path.stat().st_mode) & 0o077:
                path.chmod(0o600)
    except OSError as exc:  # not ours to change: say so, keep going
        log.warning("could not make %s private: %s", folder, exc.strerror or exc)


def _is_home(folder: Path) -> bool:
    try:
        return folder.resolve() == Path.home().resolve()
    except (RuntimeError, KeyError):  # no home folder known for this user
        return False


class Database(AsyncResource):
    """Owns the SQLite file: writes are serialised on one connection, reads use another."""

    backend = "sqlite"

    def __init__(self, path: str | Path, *, clock: Clock = clock_now) -> None:
        self.path = Path(path)
        # Every time a repository stores comes from here: the runtime's clock, which a test
        # or a bench pins (the search index dates rows by it, so "today" must not be the machine's).
        self._clock = clock
        self._writer: aiosqlite.Connection | None = None
        # The writer's sqlite3 connection and the one thread that runs group commits on it.
        self._batch_conn: sqlite3.Connection | None = None
        self._batch_thread: ThreadPoolExecutor | None = None
        self._reader: aiosqlite.Connection | None = None
        # Reads that depend on each other (a search) run together on a connection of their own.
        self._together: sqlite3.Connection | None = None
        self._together_thread: ThreadPoolExecutor | None = None
        self._write_lock = asyncio.Lock()
        self._queued: list[_QueuedWrite] = []
        self._flusher: asyncio.Task[None] | None = None

    async def open(self) -> None:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            keep_private(self.path)
            self._writer = await self._connect(shared=True)
            await self._refuse_newer_schema()  # before anything writes, even the journal mode
            await self._writer.execute("PRAGMA journal_mode=WAL")
            await self._migrate()
            self._reader = await self._connect()
            self._batch_conn = await _underlying(self._writer)
            self._batch_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-group-commit")
            self._together_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-read-together")
            self._together = await asyncio.wrap_future(self._together_thread.submit(self._connect_together))
        except (OSError, aiosqlite.Error, StorageError) as exc:
            await self.close()
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"cannot open database {self.path}: {exc}") from exc

    async def _connect(self, *, shared: bool = False) -> aiosqlite.Connection:
        # isolation_level=None: we issue BEGIN IMMEDIATE ourselves so a transaction is explicit.
        # shared: group commits run on their own thread (see _flush); the write lock keeps
        # that thread and aiosqlite's from ever using the connection at the same time.
        conn = await aiosqlite.connect(self.path, isolation_level=None, check_same_thread=not shared)
        try:
            conn.row_factory = aiosqlite.Row
            await conn.create_function(SPACED_FUNCTION, 1, spaced, deterministic=True)
            await conn.execute("PRAGMA foreign_keys=ON")
            await conn.execute("PRAGMA busy_timeout=10000")
            await conn.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            # Its thread is not a daemon thread: left open, it keeps the process alive after
            # the error was reported (a damaged file fails here, on the first read).
            await conn.close()
            raise
        return conn

    def _connect_together(self) -> sqlite3.Connection:
        """The connection of read_together, made on (and only ever used by) its thread."""
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout=10000")
            conn.execute(f"PRAGMA cache_size=-{READER_CACHE_MIB * 1024}")  # negative: KiB
        except BaseException:
            conn.close()
            raise
        return conn

    async def _refuse_newer_schema(self) -> None:
        assert self._writer is not None
        async with self._writer.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'") as cur:
            if await cur.fetchone() is None:
                return
        async with self._writer.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version") as cur:
            row = await cur.fetchone()
        found = int(row[0]) if row else 0
        if found > LATEST_VERSION:
            raise StorageError(newer_schema_message(self.path, found))

    async def close(self) -> None:
        if self._flusher is not None and not self._flusher.done():
            # Writes already queued were promised to their callers: let them land first.
            await asyncio.wait([self._flusher], timeout=10)
        thread, self._batch_thread, self._batch_conn = self._batch_thread, None, None
        if thread is not None:
            # A batch still running (its flusher was cancelled) ends before its connection closes.
            await asyncio.to_thread(thread.shutdown)
        together, self._together_thread, together_conn = self._together_thread, None, self._together
        self._together = None
        if together is not None:
            if together_conn is not None:
                together.submit(together_conn.close)  # after any reads still queued, on its own thread
            await asyncio.to_thread(together.shutdown)
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
        reached = current
        for version, description, statements in MIGRATIONS:
            if version <= current:
                continue
            await self._writer.execute("BEGIN IMMEDIATE")
            try:
                for statement in statements:
                    await self._writer.execute(statement)
                await self._writer.execute(
                    "INSERT INTO schema_version(version, description, applied_time) VALUES (?, ?, ?)",
                    (version, description, self.now()),
                )
                await self._writer.execute("COMMIT")
            except BaseException:
                await self._writer.execute("ROLLBACK")
                raise
            log.debug("database migrated to version %s (%s)", version, description)
            reached = version
        # One line for the person reading the start-up, however many steps it took.
        if current == 0 and reached:
            log.info("database created (version %s): %s", reached, self.path)
        elif reached != current:
            log.info("database migrated from version %s to %s", current, reached)

    def now(self) -> str:
        """This moment by the runtime's clock, in the stored form (bot.core.clock.iso)."""
        return iso(self._clock())

    @property
    def writer(self) -> aiosqlite.Connection:
        if self._writer is None:
            raise StorageError("database is not open")
        return self._writer

    # Group commit: single-statement writes are queued and a flusher task writes whatever
    # has queued up in one transaction (one thread hop, one commit); a failing statement
    # fails only its caller (see _write_batch). Under load this turns N commits
    # into one; alone, a write goes out at once in a batch of one. The flusher and
    # transaction() share the write lock, so no statement lands inside someone's BEGIN.
    # A batch of several runs as one function on a thread of our own, on the writer's
    # connection: through aiosqlite's public calls each statement would be a hop of its
    # own, and under load those hops cost more than the writes (500 at once: +65 % CPU).

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """One write transaction at a time; rolled back if the block raises."""
        async with self._write_lock:
            conn = self.writer
            await conn.execute("BEGIN IMMEDIATE")
            try:
                yield SqliteTransaction(conn)
            except BaseException:
                await conn.execute("ROLLBACK")
                raise
            await conn.execute("COMMIT")

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> WriteResult:
        """A single-statement write, committed before this returns."""
        result: WriteResult = await self._queue(sql, params, returning=False)
        return result

    async def write_returning(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """A single-statement write with RETURNING, read back in the same call."""
        rows: list[Any] = await self._queue(sql, params, returning=True)
        return rows

    def queue_returning(self, sql: str, params: Sequence[Any] = ()) -> asyncio.Future[list[Any]]:
        """Like write_returning, but queued at once: the caller may do other work (an LLM
        call) while it commits, and writes queued after it commit after it."""
        future: asyncio.Future[list[Any]] = self._queue(sql, params, returning=True)
        return future

    def _queue(self, sql: str, params: Sequence[Any], *, returning: bool) -> asyncio.Future[Any]:
        writer, conn, thread = self.writer, self._batch_conn, self._batch_thread
        if conn is None or thread is None:  # closing
            raise StorageError("database is not open")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queued.append(_QueuedWrite(sql, tuple(params), returning, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(writer, conn, thread), name="sqlite-group-commit")
        return future

    async def _flush(
        self, writer: aiosqlite.Connection, conn: sqlite3.Connection, thread: ThreadPoolExecutor,
    ) -> None:
        while self._queued:
            async with self._write_lock:
                batch, self._queued = self._queued, []
                try:
                    if len(batch) == 1:
                        outcomes = await _write_alone(writer, batch[0])
                    else:
                        outcomes = await _write_together(thread, conn, batch)
                except BaseException as exc:  # the connection failed: every caller hears it
                    for item in batch:
                        if not item.future.done():
                            failure = exc if isinstance(exc, Exception) else StorageError("write cancelled")
                            item.future.set_exception(failure)
                    if not isinstance(exc, Exception):
                        raise
                    continue
            for item, (ok, value) in zip(batch, outcomes):
                if item.future.done():  # the caller was cancelled; its write stands
                    continue
                if ok:
                    item.future.set_result(value)
                else:
                    item.future.set_exception(value)

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

    async def read_together(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work(conn)` on a reading connection's own thread: reads that depend on each other
        (a search's rankings, then its hits' context) in one hop, from one snapshot.

        Each hop to a database thread and back waits for both threads to be scheduled: a
        search in one hop instead of three or four (bench.recall, medians of 7 runs: p50
        3.32 -> 2.91 ms, p95 9.13 -> 7.45 ms).
        """
        thread, conn = self._together_thread, self._together
        if thread is None or conn is None:
            raise StorageError("database is not open")
        return await asyncio.wrap_future(thread.submit(_in_one_snapshot, conn, work))

    async def schema_version(self) -> int:
        row = await self.fetchone("SELECT COALESCE(MAX(version), 0) FROM schema_version")
        return int(row[0]) if row else 0
