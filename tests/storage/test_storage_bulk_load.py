"""bot/storage/bulk_load.py: rows loaded at once are stored, counted and indexed as in use."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bot.core.errors import StorageError
from bot.storage import Database, Repositories
from bot.storage.bulk_load import (
    NewAgent,
    NewChatAgent,
    NewConversation,
    NewMessage,
    NewWorkspaceFile,
    SqliteBulkLoader,
)
from memory.recall.search import MemorySearchService

STAMP = "2026-08-01 09:00:00"


async def _migrated(path: Path) -> None:
    async with Database(path):
        pass


def _load_two_agents(path: Path) -> list[int]:
    with SqliteBulkLoader(path) as load:
        load.agents([NewAgent(1, "Mate", STAMP), NewAgent(2, "Group", STAMP)])
        load.chat_agents([NewChatAgent("tg:-100", 2, STAMP)])
        load.conversations([NewConversation("console:me", 1, "console", "console:me", STAMP),
                            NewConversation("tg:-100", 2, "telegram", "tg:-100", STAMP)])
        ids = load.messages([
            NewMessage("console:me", "user", "My passport number ends in 4471.", STAMP, token_count=10),
            NewMessage("console:me", "assistant", "Noted.", STAMP),
            NewMessage("console:me", "tool", '[{"type": "tool_result", "content": "passport"}]', STAMP,
                       content_format="blocks"),
            NewMessage("console:me", "user", "我的护照在抽屉里。", STAMP),
            NewMessage("tg:-100", "user", "[Ann] The group's passport is 9999.", STAMP, sender_id="ann",
                       sender_name="Ann"),
        ])
        load.workspace_files([NewWorkspaceFile(1, "memory/2026-08-01.md", "- renewed the passport in Köln",
                                               STAMP)])
    return ids


async def test_loaded_rows_are_stored_counted_and_found_by_the_agents_own_search(tmp_path: Path) -> None:
    path = tmp_path / "mate.db"
    await _migrated(path)
    ids = _load_two_agents(path)
    assert ids == sorted(ids) and len(set(ids)) == 5
    async with Database(path) as db:
        repos = Repositories.over(db)
        assert await repos.messages.count_all() == 5
        stored = await repos.messages.after("console:me", 0)
        assert [m.id for m in stored] == ids[:4]
        assert [m.content_format for m in stored] == ["text", "text", "blocks", "text"]
        assert await repos.conversations.message_count("console:me") == 3  # the trigger counts user/assistant
        assert (await repos.agents.agent_for_chat("tg:-100")) == 2
        note = await repos.workspace_files.get(1, "memory/2026-08-01.md")
        assert note is not None and note.file_size == len(note.content.encode("utf-8")) and not note.enabled
        search = MemorySearchService(repos.search)
        found = await search.search(1, "passport")
        assert {r.get("messageId") for r in found["results"]} >= {ids[0]}
        assert any(r.get("filename") == "memory/2026-08-01.md" for r in found["results"])
        assert ids[4] not in {r.get("messageId") for r in found["results"]}  # agent 2's row stays its own
        assert ids[2] not in {r.get("messageId") for r in found["results"]}  # tool turns are never indexed
        chinese = await search.search(1, "护照")
        assert [r.get("messageId") for r in chinese["results"]][:1] == [ids[3]]
        group = await search.search(2, "passport")
        assert [r.get("messageId") for r in group["results"]] == [ids[4]]


async def test_a_second_load_returns_only_its_own_ids(tmp_path: Path) -> None:
    path = tmp_path / "mate.db"
    await _migrated(path)
    first = _load_two_agents(path)
    with SqliteBulkLoader(path) as load:
        second = load.messages([NewMessage("console:me", "user", "Another one.", STAMP),
                                NewMessage("console:me", "assistant", "Yes.", STAMP)])
    assert len(second) == 2 and min(second) > max(first)
    async with Database(path) as db:
        stored = await Repositories.over(db).messages.after("console:me", max(first))
        assert [(m.id, m.content) for m in stored] == [(second[0], "Another one."), (second[1], "Yes.")]


async def test_a_load_that_raises_leaves_nothing_behind(tmp_path: Path) -> None:
    path = tmp_path / "mate.db"
    await _migrated(path)
    with pytest.raises(RuntimeError), SqliteBulkLoader(path) as load:
        load.agents([NewAgent(1, "Mate", STAMP)])
        load.conversations([NewConversation("console:me", 1, "console", "console:me", STAMP)])
        load.messages([NewMessage("console:me", "user", "about to fail", STAMP)])
        raise RuntimeError("stop")
    async with Database(path) as db:
        repos = Repositories.over(db)
        assert await repos.messages.count_all() == 0
        assert await repos.conversations.count() == 0
        assert await MemorySearchService(repos.search).search(1, "fail") == {
            "agentId": 1, "query": "fail", "count": 0, "results": []}


def test_a_database_the_daemon_has_not_made_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    sqlite3.connect(path).close()
    with pytest.raises(StorageError, match="schema version 0"):
        with SqliteBulkLoader(path):
            pass


def test_the_loader_outside_its_block_refuses_to_write(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="not open"):
        SqliteBulkLoader(tmp_path / "mate.db").agents([NewAgent(1, "Mate", STAMP)])
