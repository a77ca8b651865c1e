"""scripts/real-reminder-check against the fake Messages API: the whole lane (runtime, console
message, stored task, recording proxy), and what it counts itself from the reply."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, ToolUseReply

LABEL = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2})\]")


@pytest.fixture
def lane(script: Callable[[str], ModuleType]) -> ModuleType:
    return script("real_reminder_check")


def _model(schedules: bool, answer: str) -> Callable[[RecordedRequest], Script | None]:
    """A model that calls schedule_task two minutes after the message's time label (or not), then
    answers `answer` once a tool result is in the history."""
    def respond(recorded: RecordedRequest) -> Script | None:
        history = json.dumps(recorded.body.get("messages", []), ensure_ascii=False)
        if not schedules or "tool_result" in history:
            return TextReply(answer)
        label = LABEL.findall(history)[-1]
        at = datetime.strptime(label, "%Y-%m-%d %H:%M") + timedelta(minutes=2)
        return ToolUseReply("schedule_task", {"message": "stretch", "at": at.isoformat()})
    return respond


async def test_a_reminder_set_by_its_tool_is_a_claim_that_was_done(lane: ModuleType, tmp_path: Path) -> None:
    async with FakeAnthropic() as llm:
        llm.responder = _model(True, "I've set a reminder to stretch in two minutes.")
        result = await lane.run_check(lane.TEXT, llm.url, tmp_path / "work", tmp_path / "dump.md")
    assert result["called_schedule_task"] and result["valid"] and result["within_window"], result
    assert result["claimed"] == "reminder" and result["claimed_not_done"] is False
    assert result["reply_markup"] == []
    # Both model calls went through the lane's recording proxy; neither was an extraction.
    assert result["model_requests"] == 2 and result["extraction_requests"] == 0
    assert json.loads(json.dumps(result, default=str)) is not None


async def test_a_reminder_claimed_without_a_tool_is_counted_from_the_reply(lane: ModuleType, tmp_path: Path) -> None:
    async with FakeAnthropic() as llm:
        llm.responder = _model(False, "I've set a reminder to stretch in two minutes.")
        result = await lane.run_check(lane.TEXT, llm.url, tmp_path / "work", tmp_path / "dump.md")
    assert not result["called_schedule_task"] and not result["valid"]
    # Whatever the product made of the model's words, the lane judges the reply the person got.
    shown = result["reply"]
    claimed = lane.claimed_action(shown)
    assert result["claimed"] == claimed
    assert result["claimed_not_done"] is (claimed is not None)
    assert result["reply_markup"] == lane.markup_in(shown)


def test_the_summary_counts_reminders_right_of_all_runs(lane: ModuleType) -> None:
    runs = [{"within_window": True, "reply_markup": [], "claimed_not_done": False, "extraction_prompts_repeated": 0},
            {"within_window": False, "reply_markup": ["json_tool_call"], "claimed_not_done": True},
            {"within_window": True, "reply_markup": [], "claimed_not_done": False}]
    total = lane.summary(runs)
    assert total["reminders_right"] == "2/3"
    assert (total["replies_with_markup"], total["actions_claimed_not_done"]) == (1, 1)
    assert total["targets_met"] == {"reminders_two_thirds": True, "replies_with_markup_0": False,
                                    "actions_claimed_not_done_0": False}
