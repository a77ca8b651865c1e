from __future__ import annotations

from pathlib import Path

import sqlite3

import aiosqlite
import pytest

from bot.core.errors import StorageError
from bot.storage import Database, Repositories
from bot.storage.agents import AgentSeed
from bot.storage.database import READER_CACHE_MIB
from bot.storage.migrations import MIGRATIONS

SPEC_TABLES = {
    "mate_agent", "mate_conversation", "mate_message", "mate_workspace_file", "mate_cron_job",
    "mate_memory_pending", "mate_memory_run", "schema_version",
}


async def _schema(path: Path) -> list[tuple[str, str]]:
    async with aiosqlite.connect(path) as conn:
        async with conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name") as cur:
            return [(r[0], r[1]) for r in await cur.fetchall()]


async def test_blank_database_gets_every_table_wal_and_foreign_keys(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "mate.db"
    async with Database(path) as db:
        names = {name for name, _ in await _schema(path)}
        assert SPEC_TABLES <= names
        assert await db.schema_version() == MIGRATIONS[-1][0]
        mode = await db.fetchone("PRAGMA journal_mode")
        assert mode[0] == "wal"
        fk = await db.fetchone("PRAGMA foreign_keys")
        assert fk[0] == 1


async def test_reads_done_together_see_one_snapshot_through_a_larger_page_cache(tmp_path: Path) -> None:
    async with Database(tmp_path / "mate.db") as db:
        await Repositories.over(db).agents.ensure(1, "Mate")

        def read(conn: sqlite3.Connection) -> tuple[int, bool, int]:
            names = conn.execute("SELECT COUNT(*) FROM mate_agent").fetchone()[0]
            return conn.execute("PRAGMA cache_size").fetchone()[0], conn.in_transaction, names

        assert await db.read_together(read) == (-READER_CACHE_MIB * 1024, True, 1)  # KiB
        with pytest.raises(sqlite3.OperationalError):
            await db.read_together(lambda conn: conn.execute("SELECT * FROM no_such_table"))
        assert await db.read_together(lambda conn: conn.in_transaction) is True  # a failed read ended its own
    with pytest.raises(StorageError):
        await db.read_together(lambda conn: None)


async def test_second_start_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "mate.db"
    async with Database(path) as db:
        await Repositories.over(db).agents.ensure(1, "Mate")
    first = await _schema(path)
    async with Database(path) as db:
        rows = await db.fetchall("SELECT version FROM schema_version")
        assert len(rows) == len(MIGRATIONS)
        assert [a.name for a in await Repositories.over(db).agents.list()] == ["Mate"]
    assert await _schema(path) == first


async def test_foreign_keys_are_enforced(tmp_path: Path) -> None:
    async with Database(tmp_path / "mate.db") as db:
        repos = Repositories.over(db)
        try:
            await repos.messages.add("no-such-conversation", "user", "hi", 1)
        except aiosqlite.IntegrityError:
            pass
        else:
            raise AssertionError("a message without its conversation was stored")


async def test_message_window_queries(tmp_path: Path) -> None:
    async with Database(tmp_path / "mate.db") as db:
        repos = Repositories.over(db)
        await repos.agents.ensure(1, "Mate")
        await repos.conversations.create("console:me", agent_id=1, channel="console", chat_key="console:me",
                                         trigger_source="console")
        ids = await repos.messages.add_many("console:me", [("user", f"m{i}", i) for i in range(10)])
        assert ids == sorted(ids)
        assert [m.content for m in await repos.messages.latest("console:me", 3)] == ["m7", "m8", "m9"]
        assert [m.content for m in await repos.messages.oldest("console:me", 2, after_id=ids[4])] == ["m5", "m6"]
        assert await repos.messages.count("console:me", after_id=ids[1], upto_id=ids[3]) == 2
        assert await repos.conversations.set_summary("console:me", "s", ids[5])
        assert not await repos.conversations.set_summary("console:me", "older", ids[2])
        conversation = await repos.conversations.get("console:me")
        assert (conversation.summary, conversation.summary_upto_message_id) == ("s", ids[5])


SEED = AgentSeed("Group", [("AGENTS.md", "agents", 0), ("MEMORY.md", "", 3)],
                 ("memory-emergence", "0 2 * * *", "UTC", "text", "review"))


async def test_per_chat_agents_are_stable_and_above_configured_ids(tmp_path: Path) -> None:
    async with Database(tmp_path / "mate.db") as db:
        repos = Repositories.over(db)
        await repos.agents.ensure(1, "Mate")
        first, created = await repos.agents.provision(SEED, chat_key="tg:-100", min_id=5)
        again, created_again = await repos.agents.provision(SEED, chat_key="tg:-100", min_id=5)
        other, _ = await repos.agents.provision(SEED, chat_key="tg:-200", min_id=5)
        assert (first, created, again, created_again) == (6, True, 6, False)
        assert other == 7
        assert [f.filename for f in await repos.workspace_files.list(6)] == ["AGENTS.md", "MEMORY.md"]
        assert len(await repos.tasks.system_tasks(6)) == 1
        assert await repos.agents.bound_to_chats([1, 6, 9]) == {6: "tg:-100"}


async def test_a_failed_provision_leaves_no_agent_behind(tmp_path: Path) -> None:
    async with Database(tmp_path / "mate.db") as db:
        repos = Repositories.over(db)
        broken = AgentSeed("Group", SEED.files, ("memory-emergence", "0 2 * * *", "UTC", "not-a-type", "x"))
        with pytest.raises(sqlite3.IntegrityError):  # the cron job's CHECK fails last
            await repos.agents.provision(broken, chat_key="tg:-100", min_id=1)
        assert await repos.agents.list() == []
        assert await repos.agents.agent_for_chat("tg:-100") is None
        assert await repos.workspace_files.count(2) == 0
        agent_id, created = await repos.agents.provision(SEED, chat_key="tg:-100", min_id=1)
        assert (agent_id, created) == (2, True)
        assert await repos.workspace_files.count(2) == 2


async def test_pending_rows_coalesce_per_conversation(tmp_path: Path) -> None:
    async with Database(tmp_path / "mate.db") as db:
        repos = Repositories.over(db)
        await repos.agents.ensure(1, "Mate")
        await repos.conversations.create("c", agent_id=1, channel="console", chat_key="c", trigger_source="console")
        await repos.memory_pending.upsert("c", 1, 10, "console")
        await repos.memory_pending.upsert("c", 1, 7, "console")
        (row,) = await repos.memory_pending.all()
        assert row.upto_message_id == 10
        await repos.memory_pending.complete("c", 9)
        assert await repos.memory_pending.get("c") is not None
        await repos.memory_pending.complete("c", 10)
        assert await repos.memory_pending.all() == []


async def test_migration_2_backfills_message_count_and_the_trigger_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "mate.db"
    async with aiosqlite.connect(path) as conn:  # a version-1 database with history in it
        await conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description TEXT NOT NULL,"
                           " applied_time TEXT NOT NULL)")
        for statement in MIGRATIONS[0][2]:
            await conn.execute(statement)
        await conn.execute("INSERT INTO schema_version VALUES (1, 'initial schema', 'x')")
        await conn.execute("INSERT INTO mate_agent VALUES (1, 'Mate', 'x', 'x')")
        await conn.execute("INSERT INTO mate_conversation(id, agent_id, channel, chat_key, trigger_source,"
                           " create_time, update_time) VALUES ('c', 1, 'console', 'c', 'console', 'x', 'x')")
        for role in ("user", "assistant", "tool", "user"):
            await conn.execute("INSERT INTO mate_message(conversation_id, role, content, create_time)"
                               " VALUES ('c', ?, 'x', 'x')", (role,))
        await conn.commit()
    async with Database(path) as db:
        repos = Repositories.over(db)
        assert await db.schema_version() == MIGRATIONS[-1][0]
        assert await repos.conversations.message_count("c") == 3
        await repos.messages.add_many("c", [("assistant", "a", 1), ("tool", "[]", 1), ("user", "u", 1)])
        assert await repos.conversations.message_count("c") == 5
        assert (await repos.conversations.get("c")).update_time != "x"


async def test_migration_3_marks_only_this_programs_block_arrays_as_blocks(tmp_path: Path) -> None:
    path = tmp_path / "mate.db"
    async with aiosqlite.connect(path) as conn:  # a version-2 database with history in it
        await conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description TEXT NOT NULL,"
                           " applied_time TEXT NOT NULL)")
        for version, description, statements in MIGRATIONS[:2]:
            for statement in statements:
                await conn.execute(statement)
            await conn.execute("INSERT INTO schema_version VALUES (?, ?, 'x')", (version, description))
        await conn.execute("INSERT INTO mate_agent VALUES (1, 'Mate', 'x', 'x')")
        await conn.execute("INSERT INTO mate_conversation(id, agent_id, channel, chat_key, trigger_source,"
                           " create_time, update_time) VALUES ('c', 1, 'console', 'c', 'console', 'x', 'x')")
        rows = [
            ("user", '[{"type":"text","text":"a user pasting JSON"}]'),
            ("assistant", '[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"t1","name":"x",'
                          '"input":{}}]'),
            ("tool", '[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]'),
            ("assistant", '[{"type": "fruit", "name": "apple"}]'),  # the model answered JSON text
            ("assistant", '[{"type":"fruit","name":"apple"}]'),
            ("assistant", "plain words"),
        ]
        for role, content in rows:
            await conn.execute("INSERT INTO mate_message(conversation_id, role, content, create_time)"
                               " VALUES ('c', ?, ?, 'x')", (role, content))
        await conn.commit()
    async with Database(path) as db:
        stored = await Repositories.over(db).messages.after("c", 0)
    assert [m.content_format for m in stored] == ["text", "blocks", "blocks", "text", "text", "text"]


async def test_add_turn_reports_the_message_count_after_it(tmp_path: Path) -> None:
    async with Database(tmp_path / "mate.db") as db:
        repos = Repositories.over(db)
        await repos.agents.ensure(1, "Mate")
        await repos.conversations.create("c", agent_id=1, channel="console", chat_key="c", trigger_source="console")
        await repos.messages.add("c", "user", "hi", 1)
        ids, count = await repos.messages.add_turn("c", [("assistant", "[]", 1), ("tool", "[]", 1),
                                                         ("assistant", "done", 1)])
        assert len(ids) == 3 and count == 3 == await repos.conversations.message_count("c")
        assert await repos.messages.count("c", roles=("user", "assistant")) == 3


async def test_group_commit_isolates_a_failing_statement_and_keeps_transactions_whole(tmp_path: Path) -> None:
    import asyncio

    async with Database(tmp_path / "mate.db") as db:
        repos = Repositories.over(db)
        await repos.agents.ensure(1, "Mate")
        await repos.conversations.create("c", agent_id=1, channel="console", chat_key="c", trigger_source="console")

        async def in_transaction() -> None:
            async with db.transaction() as conn:
                await conn.execute("INSERT INTO mate_agent(id, name, create_time, update_time) VALUES (50, 'T', 'x', 'x')")
                await asyncio.sleep(0.01)  # single writes queued meanwhile must not join this
                raise RuntimeError("abort")

        writes = [repos.messages.add("c", "user", f"m{i}", 1) for i in range(20)]
        bad = repos.messages.add("missing-conversation", "user", "orphan", 1)
        results = await asyncio.gather(in_transaction(), *writes, bad, return_exceptions=True)
        assert isinstance(results[0], RuntimeError)
        assert all(isinstance(r, int) for r in results[1:21])
        assert isinstance(results[21], aiosqlite.IntegrityError)
        assert await repos.messages.count("c") == 20
        assert await repos.agents.get(50) is None
        assert await repos.conversations.message_count("c") == 20
