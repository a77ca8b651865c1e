"""Reminders set in a chat through the model's tools, delivered to that chat by the real Telegram and
Discord adapters on their fakes, with the real clock (SPEC S27)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bot.schedule.reminders.tool import SCHEDULE_TOOL
from tests.support.clock import SteppedClock, local_at
from tests.support.fakes.anthropic import ErrorReply, TextReply, ToolUseReply
from tests.support.tasks_env import OWNER, SCHEDULED_MARK, last_text, tool_names, tool_results, world


def rows(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db)) as conn:
        return [tuple(r) for r in conn.execute(sql, params)]


async def test_a_reminder_a_few_seconds_ahead_reaches_the_chat_once(tmp_path: Path) -> None:
    async with world(tmp_path, memory={"min-messages-for-summarize": 0, "min-user-message-length": 0}) as w:
        at = local_at(w.clock, 2)
        w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "stretch", "at": at}))
        w.llm.push(TextReply("I will remind you."))
        asked = w.clock().timestamp()
        assert await w.tell(OWNER, "remind me in two seconds to stretch") == "I will remind you."
        [scheduled] = tool_results(w.chats()[1])
        result = json.loads(scheduled["content"])
        assert result["nextRun"] == at + "+00:00" and result["timezone"] == "UTC"
        assert not scheduled.get("is_error")

        await w.until(lambda: len(w.sent_to(OWNER)) >= 2, "the reminder", timeout=15)
        arrived = w.clock().timestamp()
        due = datetime.fromisoformat(at).replace(tzinfo=timezone.utc).timestamp()
        assert w.sent_to(OWNER)[1] == "It is time!"
        assert due <= arrived and arrived - asked < 10

        [turn] = w.reminder_turns()
        assert "stretch" in last_text(turn)
        assert SCHEDULE_TOOL not in tool_names(turn)  # no reminder from a reminder
        # The reminder is the chat's own conversation, stored like any turn.
        conversation = await w.rt.core.repos.conversations.active_for_chat(f"tg:{OWNER}")
        assert conversation is not None
        stored = await w.rt.core.repos.messages.after(conversation.id, 0, limit=50)
        assert stored[-1].content == "It is time!" and SCHEDULED_MARK in stored[-2].content
        await w.rt.router.drain(5)
    db = tmp_path / "mate.db"
    assert rows(db, "SELECT enabled, last_run_time IS NOT NULL FROM mate_cron_job WHERE task_type = 'reminder'") \
        == [(0, 1)]  # a one-shot task is disabled once it ran
    # The chat's first exchange was queued for memory; the reminder's own turn was not.
    pending = rows(db, "SELECT upto_message_id FROM mate_memory_pending")
    assert all(upto < stored[-1].id for (upto,) in pending)
    assert len(w.sent_to(OWNER)) == 2


async def test_the_model_failing_sends_the_reminder_as_written(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        w.reminder_reply = lambda instruction: ErrorReply(500, "api_error", "down")
        w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "call mum", "at": local_at(w.clock, 1)}))
        w.llm.push(TextReply("Noted."))
        await w.tell(OWNER, "remind me to call mum in a second")
        await w.until(lambda: len(w.sent_to(OWNER)) >= 2, "the reminder")
        assert w.sent_to(OWNER)[1] == "Reminder: call mum"
        conversation = await w.rt.core.repos.conversations.active_for_chat(f"tg:{OWNER}")
        assert conversation is not None
        stored = await w.rt.core.repos.messages.after(conversation.id, 0, limit=50)
        # Kept in the history too, so start-up recovery never answers it a second time.
        assert (stored[-1].role, stored[-1].content) == ("assistant", "Reminder: call mum")


async def test_tool_argument_errors_name_the_problem(tmp_path: Path) -> None:
    async with world(tmp_path, tasks={"max-per-chat": 2}, agent={"max-tool-rounds": 20}) as w:
        calls: list[dict[str, Any]] = [
            {"message": "late", "at": "2020-01-01T09:00:00"},
            {"message": "bad", "cron": "61 * * * *"},
            {"message": "often", "cron": "*/5 * * * *"},
            {"message": "both", "at": local_at(w.clock, 600), "cron": "0 9 * * *"},
            {"message": "neither"},
            {"message": "zone", "at": local_at(w.clock, 600), "timezone": "Mars/Olympus"},
            {"message": "date only", "at": "2030-01-01"},
            {"message": "", "at": local_at(w.clock, 600)},
            {"message": "one", "cron": "0 9 * * *"},
            {"message": "two", "at": local_at(w.clock, 600)},
            {"message": "three", "at": local_at(w.clock, 700)},
        ]
        for arguments in calls:
            w.llm.push(ToolUseReply(SCHEDULE_TOOL, arguments))
        w.llm.push(TextReply("done trying"))
        await w.tell(OWNER, "set up my reminders")
        results = [json.loads(block["content"]) | {"is_error": bool(block.get("is_error"))}
                   for recorded in w.chats()[1:] for block in tool_results(recorded)]
    errors = [r.get("error", "") for r in results]
    assert "is in the past: it is now" in errors[0] and "2020-01-01T09:00:00" in errors[0]
    assert 'cron "61 * * * *" is not a valid five-field cron expression' in errors[1]
    assert "would run every 5 minutes; a task may repeat at most every 15 minutes" in errors[2]
    assert errors[3].startswith("give exactly one of in_minutes") and errors[4].startswith("give exactly one of in_minutes")
    assert 'unknown time zone "Mars/Olympus"' in errors[5]
    assert "is not an ISO 8601 date and time" in errors[6]
    assert errors[7].startswith("message must be a non-empty text")
    assert not results[8]["is_error"] and not results[9]["is_error"]
    assert "already has 2 scheduled tasks" in errors[10]
    assert [r["is_error"] for r in results] == [True] * 8 + [False, False, True]
    assert sorted(row[0] for row in rows(tmp_path / "mate.db", "SELECT trigger_message FROM mate_cron_job "
                                                           "WHERE task_type = 'reminder'")) == ["one", "two"]


async def test_in_minutes_counts_from_the_minute_the_person_asked(tmp_path: Path) -> None:
    # A small model added "in two minutes" to the clock time and set the reminder two hours out:
    # with `in_minutes` it need not do the sum.
    asked = datetime(2026, 4, 1, 12, 0, 30, tzinfo=timezone.utc)
    clock = SteppedClock(asked)
    async with world(tmp_path, clock=clock) as w:
        w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "stretch", "in_minutes": 2}))
        w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "tea", "in_minutes": "90"}))
        w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "never", "in_minutes": 0}))
        w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "both", "in_minutes": 5, "at": "2026-04-01T13:00:00"}))
        w.llm.push(TextReply("Set."))
        await w.tell(OWNER, "remind me in two minutes to stretch, and of tea in an hour and a half")
        results = [json.loads(block["content"]) for recorded in w.chats()[1:] for block in tool_results(recorded)]
    assert results[0]["nextRun"] == "2026-04-01T12:02:00+00:00"
    assert results[1]["nextRun"] == "2026-04-01T13:30:00+00:00"
    assert results[2]["error"].startswith("in_minutes must be a whole number of minutes from 1")
    assert results[3]["error"].startswith("give exactly one of in_minutes")
