"""A PostgreSQL database made by an earlier matebot is upgraded when it opens, and ends as a new one is."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from bot.core.errors import StorageError
from bot.storage import Repositories
from bot.storage.facts import FactLink
from bot.storage.migrations import LATEST_VERSION
from bot.storage.postgres.database import PostgresDatabase
from memory.recall.search import MemorySearchService
from tests.support.postgres import Cluster
from tests.support.storage_backends import fresh_database

# schema.sql as matebot released it at version 17, the first PostgreSQL schema.
SCHEMA_17 = Path(__file__).parent / "fixtures" / "postgres_schema_v17.sql"
CATALOG = {
    "columns": "SELECT table_name, column_name, data_type, collation_name, is_nullable, column_default "
               "FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> 'schema_version' "
               "ORDER BY 1, 2",
    "functions": "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n "
                 "ON n.oid = p.pronamespace WHERE n.nspname = 'public' AND p.prokind = 'f' ORDER BY 1, 2",
    "triggers": "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1",
    "constraints": "SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid) FROM pg_constraint c "
                   "JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'public' ORDER BY 1, 2",
}


def _cluster(postgres_cluster: Cluster | str) -> Cluster:
    if isinstance(postgres_cluster, str):
        pytest.skip(f"PostgreSQL: {postgres_cluster}")
    return postgres_cluster


async def _catalog(url: str) -> dict[str, list[tuple[object, ...]]]:
    conn = await asyncpg.connect(url)
    try:
        return {name: [tuple(row) for row in await conn.fetch(sql)] for name, sql in CATALOG.items()}
    finally:
        await conn.close()


async def _made_at_17(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(SCHEMA_17.read_text(encoding="utf-8"))
        await conn.execute("INSERT INTO schema_version(version, description, applied_time) "
                           "VALUES (17, 'created', '2026-12-06 10:00:00')")
        await conn.execute("INSERT INTO mate_agent(id, name, create_time, update_time) "
                           "VALUES (1, 'Mate', '2026-12-06 10:00:00', '2026-12-06 10:00:00')")
        await conn.execute("INSERT INTO mate_conversation(id, agent_id, channel, chat_key, trigger_source, "
                           "create_time, update_time) VALUES ('tg:-1', 1, 'telegram', 'tg:-1', 'channel', "
                           "'2026-12-06 10:00:00', '2026-12-06 10:00:00')")
        await conn.execute("INSERT INTO mate_message(conversation_id, role, content, create_time) VALUES "
                           "('tg:-1', 'user', '[Ann] I went to the pottery class on Saturday', "
                           "'2026-12-06 10:01:00')")
    finally:
        await conn.close()


async def test_a_version_17_database_is_upgraded_to_what_a_new_one_is(postgres_cluster: Cluster | str) -> None:
    cluster = _cluster(postgres_cluster)
    async with fresh_database(cluster) as old, fresh_database(cluster) as new:
        await _made_at_17(old)
        async with PostgresDatabase(old, pool_size=2) as db:
            assert await db.schema_version() == LATEST_VERSION
            repos = Repositories.over(db)
            [message] = await repos.messages.latest("tg:-1", 1)
            await repos.facts.link([FactLink(message.id, "Ann went to a ceramics workshop")])
            found = await MemorySearchService(repos.search).search(1, "ceramics workshop")
        async with PostgresDatabase(new, pool_size=2):
            pass
        async with PostgresDatabase(old, pool_size=2) as again:  # a second open finds it done
            assert await again.schema_version() == LATEST_VERSION
        upgraded, made = await _catalog(old), await _catalog(new)
    assert [r["messageId"] for r in found["results"]] == [message.id]
    for part in CATALOG:
        assert upgraded[part] == made[part], part


async def test_a_schema_no_upgrade_reaches_is_refused_in_one_line(postgres_cluster: Cluster | str) -> None:
    cluster = _cluster(postgres_cluster)
    async with fresh_database(cluster) as url:
        await _made_at_17(url)
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("UPDATE schema_version SET version = 12")
        finally:
            await conn.close()
        with pytest.raises(StorageError) as refused:
            async with PostgresDatabase(url, pool_size=2):
                pass
    assert f"has schema version 12; this matebot needs {LATEST_VERSION}" in str(refused.value)
    assert "\n" not in str(refused.value)


async def test_daemons_opening_an_old_database_at_once_upgrade_it_once(postgres_cluster: Cluster | str) -> None:
    import asyncio

    cluster = _cluster(postgres_cluster)
    async with fresh_database(cluster) as url:
        await _made_at_17(url)

        async def opened() -> int:
            async with PostgresDatabase(url, pool_size=2) as db:
                return await db.schema_version()

        versions = await asyncio.gather(*(opened() for _ in range(3)))
        conn = await asyncpg.connect(url)
        try:
            steps = [int(row[0]) for row in await conn.fetch("SELECT version FROM schema_version ORDER BY version")]
        finally:
            await conn.close()
    assert versions == [LATEST_VERSION] * 3
    assert steps == [17, *range(18, LATEST_VERSION + 1)]
