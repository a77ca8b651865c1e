"""Which agent a searched row belongs to (mate_search_scope): kept in step with messages and
workspace files, filled for an index built before it, and the only way a word search keeps
to its agent's rows and to notes or conversations."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app.core import Core, open_core
from memory.recall.search import MemorySearchService
from tests.support.config import make_config
from tests.support.recall_env import talk

AGENTS = [{"id": 1, "name": "Mate"}, {"id": 2, "name": "Group"}]


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    async with open_core(make_config(tmp_path, agents=AGENTS)) as opened:
        await opened.agents.ensure_configured()
        yield opened


async def found(core: Core, agent_id: int, query: str, source: str = "all") -> list[str]:
    result = await MemorySearchService(core.repos.search).search(agent_id, query, source=source)
    return [r["snippet"] for r in result["results"]]


async def out_of_step(core: Core) -> int:
    """Index rows whose scope row is missing or names another agent than the index does."""
    row = await core.db.fetchone("SELECT COUNT(*) FROM mate_search_trigram t LEFT JOIN mate_search_scope k "
                                 "ON k.key = t.rowid WHERE k.agent_id IS NOT t.agent_id")
    return int(row[0]) if row else -1


async def test_a_word_search_keeps_to_notes_or_conversations(core: Core) -> None:
    await talk(core, "console:me", 1, "The canoe is blue.", "Nice canoe.")
    await core.workspace.write(1, "NOTES.md", "- canoe: kept in the shed")
    assert await found(core, 1, "canoe", "notes") == ["- canoe: kept in the shed"]
    assert sorted(await found(core, 1, "canoe", "conversations")) == ["Nice canoe.", "The canoe is blue."]
    assert len(await found(core, 1, "canoe")) == 3
    assert await found(core, 2, "canoe") == []


async def test_the_scope_follows_messages_and_files(core: Core) -> None:
    [told, _] = await talk(core, "console:me", 1, "The kayak paddle is in the attic.", "ok")
    await talk(core, "tg:-5", 2, "[Ann] our kayak trip is on Sunday", "ok")
    await core.workspace.write(1, "kayak.md", "kayak notes")
    # A tool turn made a person's turn, a file given to the other agent, a message deleted.
    tool = await core.db.execute("INSERT INTO mate_message(conversation_id, role, content, token_count, "
                                 "create_time) VALUES ('console:me', 'tool', 'kayak rental receipt', 5, '2026-01-01')")
    assert "kayak rental receipt" not in await found(core, 1, "kayak rental")
    await core.db.execute("UPDATE mate_message SET role = 'user' WHERE id = ?", (tool.lastrowid,))
    await core.db.execute("UPDATE mate_workspace_file SET agent_id = 2 WHERE filename = 'kayak.md'")
    await core.db.execute("DELETE FROM mate_message WHERE id = ?", (told,))

    assert await found(core, 1, "kayak") == ["kayak rental receipt"]
    assert sorted(await found(core, 2, "kayak")) == ["[Ann] our kayak trip is on Sunday", "kayak notes"]
    assert await out_of_step(core) == 0
    # Deleted rows leave nothing behind.
    await core.db.execute("DELETE FROM mate_workspace_file WHERE filename = 'kayak.md'")
    left = await core.db.fetchall("SELECT key FROM mate_search_scope WHERE key NOT IN "
                                  "(SELECT rowid FROM mate_search_trigram)")
    assert left == []


async def test_an_index_from_before_gets_its_scope(tmp_path: Path) -> None:
    config = make_config(tmp_path, agents=AGENTS)
    async with open_core(config) as core:
        await core.agents.ensure_configured()
        await talk(core, "console:me", 1, "The boat is called Marlin.", "Nice name.")
        await talk(core, "tg:-5", 2, "[Bo] my boat is called Orca", "ok")
    with sqlite3.connect(config.mate.database.path) as conn:  # the schema as version 10 left it
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' "
                                    "AND name LIKE 'tr_search_scope_%'").fetchall():
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TABLE mate_search_scope")
        conn.execute("DELETE FROM schema_version WHERE version >= 11")
    async with open_core(config) as core:
        assert await found(core, 1, "what is the boat called") == ["The boat is called Marlin."]
        assert await found(core, 2, "what is the boat called") == ["[Bo] my boat is called Orca"]
        await talk(core, "console:2", 1, "The boat trailer is rusty.", "ok")
        assert "The boat trailer is rusty." in await found(core, 1, "boat")
        assert await out_of_step(core) == 0
