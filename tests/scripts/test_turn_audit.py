"""scripts/turn_audit.py: what the model lane counts itself, per turn, from a stored transcript.

The transcript is written through the real repositories and read back as the lane reads the
daemon's database (read-only), so the counting sees the rows a run leaves.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bot.storage import Database, Repositories
from bot.storage.inspection import ReadOnlyDatabase

CHAT = "web:1"
T0 = datetime(2025, 3, 14, 9, 30, tzinfo=timezone.utc)
SAID = (
    "Hi! My name is Lena Hoffmann.",
    "Remind me in two minutes to stretch.",
    "Please remember: my sister Mia's birthday is on 14 March.",
    "I much prefer green tea to coffee.",
)


@pytest.fixture
def audit(script: Callable[[str], ModuleType]) -> ModuleType:
    return script("turn_audit")


async def _transcript(path: Path) -> None:
    """Four turns as the daemon stores them: labelled user messages, a schedule_task that failed,
    a memory tool that worked, and plain replies."""
    async with Database(path) as db:
        repos = Repositories.over(db)
        await repos.agents.ensure(1, "Mate")
        await repos.conversations.create(CHAT, agent_id=1, channel="web", chat_key=CHAT, trigger_source="channel")

        async def user(n: int) -> None:
            await repos.messages.add(CHAT, "user", f"[2025-03-14 09:3{n}] {SAID[n]}", 9)

        async def call(tool_id: str, name: str, error: bool) -> None:
            use = [{"type": "tool_use", "id": tool_id, "name": name, "input": {}}]
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id, "content": "done"}
            if error:
                result.update(is_error=True, content="at: not a date")
            await repos.messages.add(CHAT, "assistant", json.dumps(use), 9, content_format="blocks")
            await repos.messages.add(CHAT, "tool", json.dumps([result]), 9)

        await user(0)
        await repos.messages.add(CHAT, "assistant", "Nice to meet you, Lena!", 5)
        await user(1)
        await call("t1", "schedule_task", error=True)
        await repos.messages.add(CHAT, "assistant", "I've set a reminder.", 5)
        await user(2)
        await call("t2", "edit_workspace_memory_file", error=False)
        await repos.messages.add(CHAT, "assistant", "Noted!", 5)
        await user(3)
        await repos.messages.add(CHAT, "assistant", "I've saved that.", 5)


def _turns(audit: ModuleType, replies: list[str]) -> list[Any]:
    return [audit.Turn(text, reply, T0 + timedelta(minutes=n), 100.0 * n, 100.0 * n + 30)
            for n, (text, reply) in enumerate(zip(SAID, replies))]


async def test_a_reply_with_markup_and_a_claim_not_done_are_counted(tmp_path: Path, audit: ModuleType) -> None:
    await _transcript(tmp_path / "mate.db")
    with ReadOnlyDatabase(tmp_path / "mate.db") as database:
        rows = database.messages(CHAT)
    turns = _turns(audit, [
        "[2025-03-14 09:30] Nice to meet you, Lena!",  # our time label echoed: markup
        "I've set a reminder for 09:33.",  # schedule_task failed: claimed, not done
        "Noted! Mia's birthday is on 14 March.",  # a memory tool ran: done
        "I've saved that.",  # nothing ran and no file changed in this turn: not done
    ])
    tools = audit.tools_run(rows, turns)
    assert tools == [[], [], ["edit_workspace_memory_file"], []]
    versions = [
        audit.FileVersion("PROFILE.md", (T0 - timedelta(days=1)).isoformat(), "import"),  # the seed
        audit.FileVersion("PROFILE.md", (T0 + timedelta(seconds=40)).isoformat(), "extraction"),  # after turn 1
        audit.FileVersion("memory/2025-03-14.md", (T0 + timedelta(minutes=3, seconds=5)).isoformat(), "extraction"),
    ]
    changed = audit.memory_changes(versions, turns)
    assert changed == [["PROFILE.md"], [], [], []]  # the daily note is no memory file

    counted = audit.reply_counts(turns, tools, changed)
    assert counted["replies"] == 4
    assert counted["replies_with_markup"] == 1
    assert counted["markup_examples"] == [{"turn": 1, "kinds": ["time_label"],
                                           "snippet": "[2025-03-14 09:30] Nice to meet you, Lena!"}]
    assert counted["actions_claimed_not_done"] == 2
    assert [(c["turn"], c["claim"]) for c in counted["claims_not_done"]] == [(2, "reminder"), (4, "remember")]
    assert json.loads(json.dumps(counted)) == counted


async def test_a_claim_is_done_by_a_changed_memory_file_or_the_tool_that_does_it(audit: ModuleType) -> None:
    assert audit.claim_done("remember", [], ["MEMORY.md"])
    assert audit.claim_done("remember", ["edit_workspace_memory_file"], [])
    assert not audit.claim_done("remember", ["read_workspace_memory_file", "search_memory"], [])
    assert audit.claim_done("reminder", ["schedule_task"], [])
    assert not audit.claim_done("reminder", ["list_tasks"], ["MEMORY.md"])
    assert audit.claim_done("change", ["cancel_task"], [])
    assert not audit.claim_done("change", ["list_tasks"], [])


def _record(audit: ModuleType, started: float, *, extraction: bool = False, prompt_ms: float = 0,
            predicted_ms: float = 0, output: int | None = None, timings: bool = True) -> Any:
    record = audit.ProxyRecord(method="POST", path="/v1/messages", sha256="x", size=1, extraction=extraction,
                               generation=True, started=started, finished=started + 1, status=200,
                               output_tokens=output)
    if timings:
        record.timings = {"prompt_ms": prompt_ms, "predicted_ms": predicted_ms, "predicted_n": output}
    return record


def test_each_turn_is_set_against_the_models_time_for_its_new_tokens(audit: ModuleType) -> None:
    turns = _turns(audit, ["a", "b", "c"])  # each 30 s long, at 0, 100 and 200
    records = [
        _record(audit, 1, prompt_ms=8000, predicted_ms=2000),  # turn 1: 10 s of model time
        _record(audit, 40, extraction=True, prompt_ms=50000),  # the lane's extraction between turns: not a turn's
        _record(audit, 101, prompt_ms=1000, predicted_ms=9000),  # turn 2: two calls, 20 s
        _record(audit, 115, prompt_ms=2000, predicted_ms=8000),
        _record(audit, 201, prompt_ms=15000, predicted_ms=15000),  # turn 3: 30 s
    ]
    times = audit.turn_times(turns, records)
    assert times["first_turn_s"] == 30 and times["followup_s_mean"] == 30
    assert times["turn_x_raw"] == [3.0, 1.5, 1.0]
    assert times["first_turn_x_raw"] == 3.0 and times["followup_x_raw_mean"] == 1.25
    records[4].timings = None  # a call without timings: no ratio made up for its turn
    assert audit.turn_times(turns, records)["followup_x_raw_mean"] is None


def test_the_server_logs_timings_go_to_the_calls_in_the_order_they_finished(
    tmp_path: Path, audit: ModuleType, script: Callable[[str], ModuleType],
) -> None:
    log = tmp_path / "llama-server.log"
    log.write_text(
        "srv  log_server_r: request: GET /health 127.0.0.1 200\n"
        "slot print_timing: id  0 | task 0 | "
        "prompt eval time =    4000.00 ms /   380 tokens (   10.53 ms per token,    95.00 tokens per second)\n"
        "slot print_timing: id  0 | task 0 |        eval time =    2000.00 ms /    28 tokens\n"
        "slot print_timing: id  0 | task 0 |       total time =    6000.00 ms /   408 tokens\n"
        "slot print_timing: id  0 | task 3 | prompt eval time =     500.00 ms /    12 tokens (...)\n"
        "slot print_timing: id  0 | task 3 |        eval time =    1500.00 ms /    20 tokens (...)\n")
    logged = script("real_llama").logged_timings(log)
    assert [(t["prompt_n"], t["predicted_ms"]) for t in logged] == [(380, 2000.0), (12, 1500.0)]

    first, second = _record(audit, 1, output=28, timings=False), _record(audit, 5, output=20, timings=False)
    assert audit.assign_log_timings([second, first], logged)
    assert first.raw_seconds == 6.0 and second.raw_seconds == 2.0
    other = _record(audit, 1, output=90, timings=False)  # the counts disagree: the log is someone else's
    assert not audit.assign_log_timings([other, _record(audit, 5, output=20, timings=False)], logged)
    assert not audit.assign_log_timings([_record(audit, 1, timings=False)], logged)  # one call, two entries
