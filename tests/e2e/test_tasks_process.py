"""Reminders across a crash of the real daemon process: `kill -9` after a run was recorded and before
its message was sent delivers it at most once (SPEC S27)."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from tests.support.daemon_process import daemon, free_port, wait_for
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, ToolUseReply, is_memory_extraction
from tests.support.fakes.telegram import FakeTelegram

OWNER, FRIEND = 42, 7
SCHEDULED_MARK = "[Scheduled"
ANSWERS = {"stretch": "Stretch now!", "drink water": "Drink now!"}


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db, timeout=5)) as conn:
        return [tuple(r) for r in conn.execute(sql)]


def write_config(tmp_path: Path, llm: FakeAnthropic, tg: FakeTelegram, port: int) -> Path:
    config = {"mate": {
        "timezone": "UTC",
        "database": {"path": str(tmp_path / "mate.db")},
        "llm": {"api-key": "test-key", "base-url": llm.url, "max-retries": 0, "stream": False},
        "channels": {"console": {"enabled": False},
                     "telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url,
                                  "admins": [str(OWNER)], "allowed-users": [str(FRIEND)]}},
        "api": {"enabled": True, "host": "127.0.0.1", "port": port},
    }}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def last_text(recorded: RecordedRequest) -> str:
    return json.dumps(recorded.body["messages"][-1]["content"], ensure_ascii=False)


def reminder_turns(llm: FakeAnthropic, message: str) -> int:
    """Chat requests whose newest message is the instruction of the reminder `message` (memory
    extraction, whose transcript may quote it, is not one)."""
    return sum(SCHEDULED_MARK in last_text(r) and message in last_text(r)
               and not is_memory_extraction(r.body)
               for r in llm.requests if r.path == "/v1/messages")


async def test_kill_9_between_recording_a_run_and_sending_it_sends_at_most_once(tmp_path: Path) -> None:
    """Two reminders are recorded as run when the process dies: the owner's while the model writes
    it, the friend's with its answer written and stored but the channel down. After the restart the
    first goes out once (start-up recovery answers the stored instruction), the second not at all;
    neither runs again."""
    db = tmp_path / "mate.db"
    port = free_port()
    release = asyncio.Event()

    def respond(recorded: RecordedRequest) -> Script | None:
        if recorded.path != "/v1/messages":
            return None
        text = last_text(recorded)
        if SCHEDULED_MARK in text:
            held = "stretch" in text and not release.is_set()
            return TextReply(ANSWERS["stretch" if "stretch" in text else "drink water"],
                             hold=release.wait if held else None)
        for message in ANSWERS:
            if f"remind me to {message}" in text:
                at = (datetime.now(timezone.utc) + timedelta(seconds=2)).replace(tzinfo=None)
                return ToolUseReply("schedule_task", {"message": message, "at": at.isoformat(timespec="seconds")})
        return TextReply("ok")

    async with FakeAnthropic() as llm, FakeTelegram() as tg:
        llm.responder = respond

        def reminders(chat: int) -> list[str]:
            return [str(s["text"]) for s in tg.sent if s["chat_id"] == chat and s["text"] in ANSWERS.values()]

        config = write_config(tmp_path, llm, tg, port)
        async with daemon(config, port) as first:
            tg.push_text("remind me to stretch", chat_id=OWNER, user_id=OWNER)
            tg.push_text("remind me to drink water", chat_id=FRIEND, user_id=FRIEND)
            await wait_for(lambda: len(tg.sent) >= 2, 20, "the answers to both requests")
            await tg.drop_network()
            await wait_for(lambda: rows(db, "SELECT enabled, last_run_time IS NOT NULL FROM mate_cron_job "
                                            "WHERE task_type = 'reminder'") == [(0, 1), (0, 1)], 20,
                           "both runs recorded")
            await wait_for(lambda: reminder_turns(llm, "stretch") == 1, 10, "the owner's turn at the model")
            await wait_for(lambda: ("Drink now!",) in rows(db, "SELECT content FROM mate_message"), 10,
                           "the friend's answer stored")
            first.process.send_signal(signal.SIGKILL)
            assert await first.wait(10) == -signal.SIGKILL
        assert reminders(OWNER) == reminders(FRIEND) == []

        release.set()
        await tg.restore_network()
        async with daemon(config, port):
            await wait_for(lambda: len(reminders(OWNER)) == 1, 20, "the owner's reminder, recovered")
            answered = sum(s["chat_id"] == FRIEND for s in tg.sent)
            tg.push_text("thanks", chat_id=FRIEND, user_id=FRIEND)  # served after start-up's own work
            await wait_for(lambda: sum(s["chat_id"] == FRIEND for s in tg.sent) > answered, 20,
                           "the answer to thanks")

    assert reminders(OWNER) == ["Stretch now!"] and reminders(FRIEND) == []
    # The timer never ran either task again: one turn each, the owner's answered by recovery.
    assert (reminder_turns(llm, "stretch"), reminder_turns(llm, "drink water")) == (2, 1)
    assert rows(db, "SELECT COUNT(*) FROM mate_cron_job WHERE task_type = 'reminder' AND enabled = 1") == [(0,)]
    # The recovered turn is a reminder's turn too: memory extraction is not asked about it (what
    # start-up found unanalysed before it may wait; the turn itself neither waits nor was analysed).
    [(answer_id,)] = rows(db, "SELECT id FROM mate_message WHERE content = 'Stretch now!'")
    assert all(upto < answer_id for (upto,) in rows(
        db, f"SELECT upto_message_id FROM mate_memory_pending WHERE conversation_id = 'tg:{OWNER}'"))
    assert not [r for r in llm.requests if r.path == "/v1/messages" and is_memory_extraction(r.body) and "Stretch now!" in json.dumps(r.body["messages"], ensure_ascii=False)]
