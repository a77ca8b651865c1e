"""PostgresDatabase: the repositories' SqlDatabase on a PostgreSQL server, through asyncpg."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from importlib import resources
from typing import TYPE_CHECKING, Any

from bot.core.clock import Clock, iso
from bot.core.clock import utc_now as clock_now
from bot.core.errors import StorageError
from bot.core.lifecycle import AsyncResource
from bot.core.redaction import redacted
from bot.storage.migrations import LATEST_VERSION, MIGRATIONS

from bot.storage.sql import Row, WriteResult

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger(__name__)

# Every daemon on the database takes this lock while it creates or checks the schema, so two
# starting at once do not both create it.
_SCHEMA_LOCK = 0x6D617465  # "mate"
FIRST_VERSION = 17  # the first schema PostgreSQL was created at; its upgrades (upgrades/vN.sql) start there
MIGRATION_DESCRIPTIONS = {version: description for version, description, _ in MIGRATIONS}
_NUMBERED_CACHE = 4096


def numbered(sql: str) -> str:
    """`?` placeholders as PostgreSQL's `$1, $2, …`; quoted text and identifiers are left alone."""
    out: list[str] = []
    count = 0
    quote: str | None = None
    for char in sql:
        if quote is not None:
            if char == quote:
                quote = None
        elif char in ("'", '"'):
            quote = char
        elif char == "?":
            count += 1
            out.append(f"${count}")
            continue
        out.append(char)
    return "".join(out)


def _rowcount(status: str) -> int:
    """The rows a command touched, from its status tag ("UPDATE 3", "INSERT 0 1")."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


@contextmanager
def storage_errors() -> Iterator[None]:
    """The driver's and the network's failures as StorageError, as SQLite's are met: the router
    answers them with an apology, never silence."""
    import asyncpg

    try:
        yield
    except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError) as exc:
        # InternalClientError: a connection the server dropped mid-statement, met by the next one.
        raise StorageError(f"the database failed: {type(exc).__name__}: {exc}") from exc


class PostgresTransaction:
    """Statements on one pooled connection inside its transaction."""

    __slots__ = ("_conn", "_sql")

    def __init__(self, conn: asyncpg.Connection, sql: PostgresDatabase) -> None:
        self._conn = conn
        self._sql = sql

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> WriteResult:
        status = await self._conn.execute(self._sql.text(sql), *params)
        return WriteResult(0, _rowcount(status))

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self._conn.executemany(self._sql.text(sql), [tuple(r) for r in rows])

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = await self._conn.fetchrow(self._sql.text(sql), *params)
        return row

    async def serialize(self, name: str) -> None:
        await self._conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", name)


def _sql(name: str) -> str:
    """One of this package's SQL files (schema.sql, functions.sql, upgrades/vN.sql)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


class PostgresDatabase(AsyncResource):
    """A pool of connections to one PostgreSQL database; the schema is created on first open."""

    backend = "postgresql"

    def __init__(self, url: str, *, clock: Clock = clock_now, pool_size: int = 10,
                 command_timeout: float | None = 60.0) -> None:
        self.url = url
        self._clock = clock
        self._pool_size = pool_size
        self._command_timeout = command_timeout  # None: a statement may take as long as it takes (a copy)
        self._pool: asyncpg.Pool | None = None
        self._texts: dict[str, str] = {}
        self._queued: set[asyncio.Task[list[Any]]] = set()

    async def open(self) -> None:
        import asyncpg  # only when configured: SQLite users never load it

        try:
            self._pool = await asyncpg.create_pool(self.url, min_size=1, max_size=self._pool_size,
                                                   command_timeout=self._command_timeout)
            await self._create_schema()
        except (ValueError, OverflowError, TypeError) as exc:  # the URL itself: its text may quote the password
            await self.close()
            raise StorageError(f"cannot open database {redacted(self.url)}: mate.storage.url is not a "
                               f"valid postgresql:// URL ({type(exc).__name__})") from None
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            await self.close()
            raise StorageError(f"cannot open database {redacted(self.url)}: {exc}") from exc

    async def close(self) -> None:
        if self._queued:
            await asyncio.wait(self._queued, timeout=10)
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _create_schema(self) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
            exists = await conn.fetchval("SELECT to_regclass('schema_version') IS NOT NULL")
            if exists:
                found = int(await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version"))
                if found != LATEST_VERSION:
                    await self._upgrade(conn, found)
                return
            await conn.execute(_sql("schema.sql"))
            await conn.execute(_sql("functions.sql"))
            await conn.execute("INSERT INTO schema_version(version, description, applied_time) VALUES ($1, $2, $3)",
                               LATEST_VERSION, "created", self.now())
            log.info("database created (version %s): %s", LATEST_VERSION, redacted(self.url))

    async def _upgrade(self, conn: asyncpg.Connection, found: int) -> None:
        """From schema `found` to this matebot's, one upgrades/vN.sql at a time, in the transaction
        that holds the schema lock: another daemon opening meanwhile waits, then finds it done."""
        steps = resources.files(__package__).joinpath("upgrades")
        wanted = range(found + 1, LATEST_VERSION + 1)
        if found > LATEST_VERSION or found < FIRST_VERSION or not all(
                steps.joinpath(f"v{v}.sql").is_file() for v in wanted):
            raise StorageError(
                f"database {redacted(self.url)} has schema version {found}; this matebot needs "
                f"{LATEST_VERSION}: run the matebot version that made it, or start with an empty database")
        for version in wanted:
            await conn.execute(_sql(f"upgrades/v{version}.sql"))
            await conn.execute("INSERT INTO schema_version(version, description, applied_time) VALUES ($1, $2, $3)",
                               version, MIGRATION_DESCRIPTIONS[version], self.now())
        await conn.execute(_sql("functions.sql"))  # every function and trigger as this matebot has them
        log.info("database upgraded from version %s to %s: %s", found, LATEST_VERSION, redacted(self.url))

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StorageError("database is not open")
        return self._pool

    def text(self, sql: str) -> str:
        """The statement as PostgreSQL takes it (numbered placeholders), converted once."""
        converted = self._texts.get(sql)
        if converted is None:
            if len(self._texts) >= _NUMBERED_CACHE:
                self._texts.clear()
            converted = self._texts[sql] = numbered(sql)
        return converted

    def now(self) -> str:
        return iso(self._clock())

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[PostgresTransaction]:
        with storage_errors():
            # READ COMMITTED whatever the server's default: the version checks in UPDATE … WHERE and
            # serialize()'s locks rely on each statement seeing what committed before it.
            async with self.pool.acquire() as conn, conn.transaction(isolation="read_committed"):
                yield PostgresTransaction(conn, self)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> WriteResult:
        with storage_errors():
            status = await self.pool.execute(self.text(sql), *params)
        return WriteResult(0, _rowcount(status))

    async def write_returning(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with storage_errors():
            return list(await self.pool.fetch(self.text(sql), *params))

    def queue_returning(self, sql: str, params: Sequence[Any] = ()) -> asyncio.Future[list[Any]]:
        task = asyncio.create_task(self.write_returning(sql, params), name="postgres-queued-write")
        self._queued.add(task)
        task.add_done_callback(self._queued.discard)
        return task

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with storage_errors():
            return list(await self.pool.fetch(self.text(sql), *params))

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any | None:
        with storage_errors():
            return await self.pool.fetchrow(self.text(sql), *params)

    async def schema_version(self) -> int:
        with storage_errors():
            return int(await self.pool.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version"))
