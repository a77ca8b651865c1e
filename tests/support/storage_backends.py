"""The storage contract's two backends: a SQLite file in tmp_path and a fresh database on the
throwaway PostgreSQL cluster (tests/support/postgres.py), each opened as the daemon opens it."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bot.storage import Database
from bot.storage.postgres.database import PostgresDatabase
from bot.storage.sql import SqlDatabase
from tests.support.postgres import Cluster, NoPostgres, throwaway_cluster

BACKENDS = ("sqlite", "postgresql")
_names = itertools.count()


def cluster_or_reason() -> Iterator[Cluster | str]:
    """A session fixture's body: the cluster, or why there is none (the PostgreSQL side skips)."""
    try:
        context = throwaway_cluster()
        cluster = context.__enter__()
    except NoPostgres as exc:
        if os.environ.get("MATEBOT_REQUIRE_POSTGRES"):  # CI installed it: not starting is a failure
            raise
        yield str(exc)
        return
    try:
        yield cluster
    finally:
        context.__exit__(None, None, None)


@asynccontextmanager
async def fresh_database(cluster: Cluster) -> AsyncIterator[str]:
    """A new empty database on the cluster, dropped afterwards: its URL."""
    import asyncpg

    name = f"t{os.getpid()}_{next(_names)}"
    admin = await asyncpg.connect(cluster.url("postgres"))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield cluster.url(name)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@asynccontextmanager
async def storage_url(kind: str, cluster: Cluster | str) -> AsyncIterator[str]:
    """`mate.storage.url` for the backend: "" (SQLite at database.path) or a fresh PostgreSQL database."""
    if kind == "sqlite":
        yield ""
        return
    if isinstance(cluster, str):
        pytest.skip(f"PostgreSQL: {cluster}")
    async with fresh_database(cluster) as url:
        yield url


@asynccontextmanager
async def open_backend(kind: str, tmp_path: Path, cluster: Cluster | str) -> AsyncIterator[SqlDatabase]:
    if kind == "sqlite":
        async with Database(tmp_path / "mate.db") as db:
            yield db
        return
    if isinstance(cluster, str):
        pytest.skip(f"PostgreSQL: {cluster}")
    async with fresh_database(cluster) as url, PostgresDatabase(url, pool_size=4) as pg:
        yield pg
