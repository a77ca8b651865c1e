"""bot/storage/inspection.py, and real_model_check's figures read through it."""

from __future__ import annotations

import importlib
import json
import sqlite3
from pathlib import Path
from types import ModuleType

import pytest

from bot.storage import Database, Repositories
from bot.storage.inspection import ReadOnlyDatabase

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
CHAT = "console:me"


@pytest.fixture
def lane(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(SCRIPTS))  # a script and its siblings, as `python scripts/...` finds them
    return importlib.import_module("real_model_check")


async def _daemon_database(path: Path) -> list[int]:
    """What a short lane run leaves: extraction runs of each outcome, and a chat with tool calls."""
    async with Database(path) as db:
        repos = Repositories.over(db)
        await repos.agents.ensure(1, "Mate")
        for chat in (CHAT, "elsewhere"):
            await repos.conversations.create(chat, agent_id=1, channel="console", chat_key=chat,
                                             trigger_source="channel")
        await repos.memory_runs.record(1, "summarize", "completed", conversation_id=CHAT)
        failed = await repos.memory_runs.start(1, "summarize", CHAT)
        await repos.memory_runs.finish(failed, "failed", reason="invalid_json", error="Expecting value: line 1")
        await repos.memory_runs.record(1, "summarize", "skipped", conversation_id=CHAT, reason="nothing new")
        await repos.memory_runs.record(1, "emergence", "completed")
        await repos.memory_runs.start(1, "summarize", CHAT)  # still running: neither ran nor skipped
        call = [{"type": "tool_use", "id": "t1", "name": "memory_write", "input": {}}]
        result = [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]
        return [
            await repos.messages.add(CHAT, "user", "Remember Mia's birthday.", 5),
            await repos.messages.add(CHAT, "assistant", json.dumps(call), 5, content_format="blocks"),
            await repos.messages.add(CHAT, "tool", json.dumps(result), 5),
            await repos.messages.add(CHAT, "assistant", 'I will call {"name": "memory_read"} now.', 5),
            await repos.messages.add("elsewhere", "user", "not this chat", 1),
        ]


async def test_the_read_only_view_reads_back_runs_and_messages_in_order(tmp_path: Path) -> None:
    path = tmp_path / "data" / "mate.db"
    ids = await _daemon_database(path)
    with ReadOnlyDatabase(path) as database:
        runs = database.memory_runs("summarize")
        assert [r.status for r in runs] == ["completed", "failed", "skipped", "running"]
        assert runs[1].reason == "invalid_json" and runs[1].error == "Expecting value: line 1"
        assert [r.kind for r in database.memory_runs("emergence")] == ["emergence"]
        messages = database.messages(CHAT)
        assert [m.id for m in messages] == ids[:4]
        assert [(m.role, m.content_format) for m in messages] == [
            ("user", "text"), ("assistant", "blocks"), ("tool", "blocks"), ("assistant", "text")]
        assert database.messages("no such chat") == []


async def test_the_read_only_view_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "mate.db"
    await _daemon_database(path)
    database = ReadOnlyDatabase(path)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):  # opened with mode=ro
        database._conn.execute("CREATE TABLE scratch(x)")
    assert len(database.messages(CHAT)) > 0
    database.close()
    with pytest.raises(sqlite3.ProgrammingError):  # closed
        database.messages(CHAT)
    with pytest.raises(sqlite3.OperationalError):  # mode=ro: no file is made where none is
        ReadOnlyDatabase(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()


async def test_real_model_check_figures_come_from_what_the_daemon_stored(tmp_path: Path, lane: ModuleType) -> None:
    path = tmp_path / "mate.db"
    await _daemon_database(path)
    with ReadOnlyDatabase(path) as database:
        extraction = lane.extraction_stats(database)
        tools = lane.tool_stats(database, CHAT)
        nothing = lane.tool_stats(database, None)
    assert extraction["extraction_runs"] == 2
    assert extraction["valid_extraction_share"] == 0.5
    assert extraction["extraction_skipped"] == 1
    assert isinstance(extraction["extraction_s_mean"], float)
    assert extraction["extraction_errors"] == ["Expecting value: line 1"]
    assert tools == {"tool_calls_attempted": 2, "tool_calls_worked": 1, "tool_calls_written_as_text_not_run": 1,
                     "tools_used": ["memory_write"]}
    assert nothing["tool_calls_attempted"] == 0 and nothing["tools_used"] == []
