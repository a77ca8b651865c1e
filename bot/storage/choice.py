"""Which database the configuration names: SQLite (the default) or PostgreSQL."""

from __future__ import annotations

from bot.core.clock import Clock
from bot.core.clock import utc_now as clock_now
from bot.core.config import MateConfig
from bot.storage.database import Database
from bot.storage.postgres.database import PostgresDatabase


def database_for(mate: MateConfig, *, clock: Clock = clock_now) -> Database | PostgresDatabase:
    """Not yet open: enter it (`async with`) to connect, create or migrate."""
    storage = mate.storage
    if storage.postgres:
        return PostgresDatabase(storage.url, clock=clock)
    return Database(mate.sqlite_file, clock=clock)
