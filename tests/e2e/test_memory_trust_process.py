"""A receipt is sent only after its extraction committed: `kill -9` of the real daemon between the
model's answer and the commit leaves no receipt and no change (SPEC S29)."""

from __future__ import annotations

import json
import signal
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import yaml

from tests.support.daemon_process import PROCESS_TIMEOUT, daemon, free_port, wait_for
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply
from tests.support.fakes.telegram import FakeTelegram
from tests.support.fakes.anthropic import is_memory_request
from tests.support.trust_env import OWNER

MEMORY_REPLY = json.dumps({"should_update": True, "reason": "where the user lives", "daily_entry": "",
                           "memory_update": "", "profile_update": "# User profile\n\n- Lives in Lisbon"})
RECEIPT = "Noted: Lives in Lisbon (PROFILE.md)\n/undo to take it back"


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db, timeout=5)) as conn:
        return [tuple(r) for r in conn.execute(sql)]


def write_config(tmp_path: Path, llm: FakeAnthropic, tg: FakeTelegram, port: int) -> Path:
    config = {"mate": {
        "timezone": "UTC",
        "database": {"path": str(tmp_path / "mate.db")},
        "llm": {"api-key": "test-key", "base-url": llm.url, "max-retries": 0, "stream": False},
        "memory": {"cooldown-minutes": 0, "idle-minutes": 0, "min-messages-for-summarize": 0},
        "channels": {"console": {"enabled": False},
                     "telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url,
                                  "admins": [str(OWNER)]}},
        "api": {"enabled": True, "host": "127.0.0.1", "port": port},
    }}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


async def test_kill_9_between_the_models_answer_and_the_commit_sends_no_receipt(tmp_path: Path) -> None:
    db = tmp_path / "mate.db"
    port = free_port()
    # The test holds the database's write lock from the moment the memory request arrives: the
    # daemon gets the model's answer but cannot commit it.
    lock: list[sqlite3.Connection] = []

    def respond(recorded: RecordedRequest) -> Script | None:
        if recorded.path != "/v1/messages":
            return None
        if is_memory_request(recorded):
            if not lock and len([r for r in llm.requests if is_memory_request(r)]) == 1:
                conn = sqlite3.connect(db, timeout=10, isolation_level=None)
                conn.execute("BEGIN IMMEDIATE")
                lock.append(conn)
            return TextReply(MEMORY_REPLY)
        return TextReply("ok")

    def sent() -> list[str]:
        return [str(s["text"]) for s in tg.sent]

    async with FakeAnthropic() as llm, FakeTelegram() as tg:
        llm.responder = respond
        config = write_config(tmp_path, llm, tg, port)
        async with daemon(config, port) as first:
            seed = rows(db, "SELECT content, version FROM mate_workspace_file WHERE filename = 'PROFILE.md'")
            tg.push_text("I live in Lisbon now, since last month", chat_id=OWNER, user_id=OWNER)
            await wait_for(lambda: "ok" in sent(), 20, "the reply")
            await wait_for(lambda: any(is_memory_request(r) and r.usage is not None for r in llm.requests), 20,
                           "the model's answer to the extraction")
            first.process.send_signal(signal.SIGKILL)
            assert await first.wait(PROCESS_TIMEOUT) == -signal.SIGKILL
        lock[0].rollback()
        lock[0].close()
        assert sent() == ["ok"]  # no receipt
        assert rows(db, "SELECT content, version FROM mate_workspace_file WHERE filename = 'PROFILE.md'") == seed
        assert rows(db, "SELECT COUNT(*) FROM mate_workspace_file_history WHERE change = 'extraction'") == [(0,)]

        async with daemon(config, port):  # the pending extraction is redone, and told once
            await wait_for(lambda: RECEIPT in sent(), 20, "the receipt after the restart")
            await wait_for(lambda: not rows(db, "SELECT 1 FROM mate_memory_pending"), 10, "the pending row done")
        assert sent() == ["ok", RECEIPT]
        assert rows(db, "SELECT content FROM mate_workspace_file WHERE filename = 'PROFILE.md' AND deleted = 0") == [
            ("# User profile\n\n- Lives in Lisbon\n",)]
