"""Never claim an action that did not happen (SPEC S34), through the real router and agent on the fake
Messages API.

A small model says "Noted!" to "remember …" without writing anything, "I'll remind you" without
scheduling, and "Let's try something different" after the reminder tool refused: the reply the
person gets says plainly what did not happen, and an explicit "remember" is still kept by the
memory worker at once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bot.conversation import claims
from bot.core.prompts import PromptLibrary
from bot.schedule.reminders import tool as task_tool
from memory.workspace.tool import WRITE_TOOL
from tests.support.clock import SteppedClock, local_at
from tests.support.config import pinned_clock
from tests.support.eventually import eventually
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, ToolUseReply, \
    is_memory_request
from tests.support.memory_env import NOON, memory_reply
from tests.support.runtime import chat as say
from tests.support.runtime import running
from tests.support.tasks_env import OWNER, world

EN = PromptLibrary("en")


def chats(fake: FakeAnthropic) -> list[RecordedRequest]:
    return [r for r in fake.requests if r.path == "/v1/messages" and not is_memory_request(r)]


def tool_results(recorded: RecordedRequest) -> list[dict[str, Any]]:
    return [b for m in recorded.body["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]


async def stored_reply(rt: Any) -> str:
    conversation = await rt.core.repos.conversations.active_for_chat("console:me")
    assert conversation is not None
    stored = await rt.core.repos.messages.after(conversation.id, 0, limit=50)
    assert stored[-1].role == "assistant"
    return str(stored[-1].content)


def test_the_reminder_tool_names_are_the_ones_the_agent_checks() -> None:
    assert (claims.SCHEDULE_TOOL, claims.CANCEL_TOOL) == (task_tool.SCHEDULE_TOOL, task_tool.CANCEL_TOOL)


@pytest.mark.parametrize(("locale", "asked", "claimed", "kept"), [
    ("en", "remember that my sister is called Mia", "Noted! I'll remember that.", ""),
    ("en", "remember that my sister is called Mia", "I know you have a sister Mia, how lovely!", ""),
    # The sentence that claims it goes; the rest of the reply stays.
    ("en", "remember that my sister is called Mia", "Mia is a lovely name! I'll remember that. Anything else?",
     "Mia is a lovely name! Anything else?"),
    ("zh-CN", "记住我妹妹叫米娅", "好的，记住了！", ""),
    # the real lane's 1.5B model, Messages API
    ("en", "Please remember this and write it into your MEMORY.md memory file: my sister Mia's birthday is on 14 March.",
     "I have successfully remembered your sister Mia's birthday is on March 14th.", ""),
])
async def test_a_remember_claimed_without_a_tool_says_it_is_not_saved_yet_and_is_kept_at_once(
    tmp_path: Path, locale: str, asked: str, claimed: str, kept: str,
) -> None:
    line = PromptLibrary(locale).text("honest_not_saved_yet")
    expected = f"{kept}\n\n{line}" if kept else line

    def respond(recorded: RecordedRequest) -> Script | None:
        return TextReply(memory_reply(daily="- sister Mia")) if is_memory_request(recorded) else None

    async with FakeAnthropic() as fake, running(tmp_path, fake, memory_worker=True, clock=SteppedClock(NOON),
                                                locale=locale, memory={"idle-minutes": 10}) as rt:
        fake.responder = respond
        fake.push(TextReply(claimed))
        services = rt.memory_services
        assert services is not None
        loop = asyncio.create_task(services.worker.run(), name="memory-worker")
        try:
            reply = await say(rt, asked)
            # Kept at once, not after the ten quiet minutes (the stepped clock never gets there).
            await eventually(lambda: any(is_memory_request(r) for r in fake.requests), "the extraction", timeout=10)
            assert await services.worker.drain(5)
            note, _ = await rt.core.workspace.read_text(1, "memory/2026-04-01.md")
            stored = await stored_reply(rt)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    assert reply == expected
    assert stored == expected  # what the person got is what the next turn reads
    assert "- sister Mia" in note


async def test_a_remember_in_incognito_does_not_promise_it_is_kept(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(tmp_path, fake) as rt:
        await say(rt, "/incognito on")
        fake.push(TextReply("Noted!"))
        reply = await say(rt, "remember that my sister is called Mia")
    assert reply == EN.text("honest_not_saved")


async def test_a_remember_the_memory_tool_saved_is_answered_unchanged(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(tmp_path, fake) as rt:
        fake.push(ToolUseReply(WRITE_TOOL, {"agentId": 1, "filename": "family.md", "content": "Sister: Mia."}))
        fake.push(TextReply("Noted! I'll remember that."))
        reply = await say(rt, "remember that my sister is called Mia")
        saved, _ = await rt.core.workspace.read_text(1, "family.md")
    assert reply == "Noted! I'll remember that."
    assert saved == "Sister: Mia."


async def test_a_memory_write_that_failed_is_said_to_have_failed(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(tmp_path, fake, memory={"auto-summarize-enabled": False}) as rt:
        fake.push(ToolUseReply(WRITE_TOOL, {"agentId": 1, "filename": "../family.md", "content": "Sister: Mia."}))
        fake.push(TextReply("I've saved it."))
        reply = await say(rt, "please remember that my sister is called Mia")
    assert reply == EN.text("honest_memory_failed")


@pytest.mark.parametrize(("locale", "asked", "claimed"), [
    ("en", "remind me in two minutes to stretch", "I'll remind you in two minutes!"),
    ("zh-CN", "两分钟后提醒我伸个懒腰", "好的，两分钟后会提醒你！"),
])
async def test_a_reminder_claimed_without_a_tool_says_none_was_set(
    tmp_path: Path, locale: str, asked: str, claimed: str,
) -> None:
    async with FakeAnthropic() as fake, running(tmp_path, fake, locale=locale) as rt:
        fake.push(TextReply(claimed))
        reply = await say(rt, asked)
        offered = [t["name"] for t in chats(fake)[0].body.get("tools", [])]
        tasks = await rt.core.repos.tasks.for_agent(1)
    assert task_tool.SCHEDULE_TOOL in offered
    line = PromptLibrary(locale).text("honest_reminder_missing")
    assert reply in (line, f"{claimed}\n\n{line}")
    assert line in reply and tasks == []


@pytest.mark.parametrize(("arguments", "said", "reason"), [
    ({"message": "stretch", "at": "2020-01-01T09:00:00"}, "Done! Reminder set.", "is in the past: it is now"),
    ({"message": "stretch", "cron": "*/5 * * * *"}, "Let's try something different.",
     "would run every 5 minutes"),
])
async def test_a_reminder_the_tool_refused_is_said_to_have_failed_with_the_reason(
    tmp_path: Path, arguments: dict[str, Any], said: str, reason: str,
) -> None:
    async with FakeAnthropic() as fake, running(tmp_path, fake) as rt:
        fake.push(ToolUseReply(task_tool.SCHEDULE_TOOL, arguments))
        fake.push(TextReply(said))
        reply = await say(rt, "remind me to stretch")
        [result] = tool_results(chats(fake)[1])
    refusal = json.loads(result["content"])
    assert result.get("is_error") is True
    # The model is told what is wrong and, apart from it, what to do.
    assert reason in refusal["error"] and refusal["fix"] == EN.text("task_fix_schedule")
    head, _, line = reply.rpartition("\n\n")
    assert line == EN.text("honest_reminder_failed", reason=refusal["error"])
    assert head in ("", said)


async def test_a_retry_that_worked_leaves_the_reply_alone(tmp_path: Path) -> None:
    clock = pinned_clock()
    async with FakeAnthropic() as fake, running(tmp_path, fake, clock=clock) as rt:
        fake.push(ToolUseReply(task_tool.SCHEDULE_TOOL, {"message": "stretch", "at": "2020-01-01T09:00:00"}))
        fake.push(ToolUseReply(task_tool.SCHEDULE_TOOL, {"message": "stretch", "at": local_at(clock, 600)}))
        fake.push(TextReply("Reminder set: in ten minutes."))
        reply = await say(rt, "remind me in ten minutes to stretch")
        [task] = await rt.core.repos.tasks.for_agent(1)
    assert reply == "Reminder set: in ten minutes."
    assert task.message == "stretch"


@pytest.mark.parametrize(("locale", "asked", "answered"), [
    ("en", "what is the capital of France?", "Noted: it is Paris. I'll remind you that it is lovely in May."),
    ("en", "do you remember my sister's name?", "Yes, I remember: your sister is Mia."),
    ("en", "remind me what we talked about yesterday", "We talked about your trip to Lisbon."),
    ("zh-CN", "法国的首都是哪里？", "是巴黎。记住了吗？"),
])
async def test_ordinary_replies_are_unchanged(tmp_path: Path, locale: str, asked: str, answered: str) -> None:
    async with FakeAnthropic() as fake, running(tmp_path, fake, locale=locale) as rt:
        fake.push(TextReply(answered))
        reply = await say(rt, asked)
    assert reply == answered


async def test_a_scheduled_run_that_delivers_a_reminder_is_not_amended(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        w.reminder_reply = lambda instruction: TextReply("Noted: time to remember your water, I'll remind you again!")
        w.llm.push(ToolUseReply(task_tool.SCHEDULE_TOOL, {"message": "remember to drink water", "at": local_at(w.clock, 1)}))
        w.llm.push(TextReply("I'll remind you in a second."))
        assert await w.tell(OWNER, "remind me in a second to drink water") == "I'll remind you in a second."
        await w.until(lambda: len(w.sent_to(OWNER)) >= 2, "the reminder")
        assert w.sent_to(OWNER)[1] == "Noted: time to remember your water, I'll remind you again!"
