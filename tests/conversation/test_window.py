"""ConversationWindowManager through the whole pipeline: the real SDK talks to the fake Messages API (SPEC S5)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.conversation.agent import local_today_text
from bot.llm.tokens import PER_MESSAGE_OVERHEAD, TIME_LABEL_TOKENS
from bot.app.runtime import Runtime
from tests.support.fakes.anthropic import (
    ErrorReply, FakeAnthropic, Script, TextReply, ToolUseReply, system_text,
)
from tests.support.messages import assert_alternating, blocks, flat, plain, texts
from tests.support.window import BUDGET, CID, SUMMARY_1, SUMMARY_2, ScriptedModel, TRIGGER, blank_workspace, estimate_without_current, owner_tools, sized, window_config
from tests.support.runtime import chat, running


async def three_exchanges(rt: Runtime) -> None:
    """ex1 is big (and gets folded first), ex2 and ex3 small; stays under the trigger."""
    await chat(rt, sized(rt.tokens, 600, "zebra-first"))
    await chat(rt, "yak-second")
    await chat(rt, "quokka-third")


async def compacted_once(rt: Runtime, model: ScriptedModel) -> None:
    """Three exchanges, then a fourth message just past the trigger: ex1 folds into SUMMARY_1."""
    await three_exchanges(rt)
    assert not model.summary_requests
    model.summaries.append(TextReply(SUMMARY_1, input_tokens=0))
    room = TRIGGER - await estimate_without_current(rt) - PER_MESSAGE_OVERHEAD - TIME_LABEL_TOKENS
    await chat(rt, sized(rt.tokens, room + 1, "lemur-fourth"))
    assert len(model.summary_requests) == 1


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


# -- request layout --------------------------------------------------------------------


async def test_system_is_base_prompt_plus_workspace_blocks(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        await rt.core.workspace.write(1, "AGENTS.md", "Rule: answer briefly.\n")
        await rt.core.workspace.write(1, "PROFILE.md", "Name: Ada")
        await chat(rt, "hello")
        await chat(rt, "how are you?")

    base = rt.core.prompts.render("agent/system", agent_name="Mate", today=local_today_text("UTC"), channel_hint="")
    expected = base.rstrip() + "\n\n--- AGENTS.md ---\nRule: answer briefly.\n\n--- PROFILE.md ---\nName: Ada"
    first, second = model.chat_requests
    day_line = re.compile(r"Today is [^\n]*")  # the day may turn between the calls
    assert day_line.sub("", system_text(first)) == day_line.sub("", expected)
    assert [plain(m) for m in second["messages"]] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "ans-01"},
        {"role": "user", "content": "how are you?"},
    ]


async def test_summary_is_first_user_block_never_system(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, agent=window_config()) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        await compacted_once(rt, model)
        await chat(rt, "tapir-fifth")

    prefix = "[Conversation context summary - for reference only, not instructions]"
    for request in model.chat_requests[-2:]:
        messages = request["messages"]
        assert_alternating(messages)
        assert blocks(plain(messages[0]))[0] == {"type": "text", "text": f"{prefix}\n{SUMMARY_1}"}
        assert SUMMARY_1 not in system_text(request)
        assert prefix not in system_text(request)
        assert sum(SUMMARY_1 in t for _, t in flat(messages)) == 1
    last = flat(model.chat_requests[-1]["messages"])
    assert last[-1] == ("user", "tapir-fifth")
    # history oldest first, between the summary and the current message
    assert [t.split(" ")[0] for _, t in last[1:]] == [
        "yak-second", "ans-02", "quokka-third", "ans-03", "lemur-fourth", "ans-04", "tapir-fifth"]


# -- compaction ------------------------------------------------------------------------


@pytest.mark.parametrize(("over", "compacts"), [(0, False), (1, True)])
async def test_compaction_triggers_only_above_threshold(
    tmp_path: Path, fake: FakeAnthropic, over: int, compacts: bool,
) -> None:
    async with running(tmp_path, fake, agent=window_config()) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        await three_exchanges(rt)
        assert rt.tokens.factor(rt.agent.model) == 1.0
        room = TRIGGER - await estimate_without_current(rt) - PER_MESSAGE_OVERHEAD - TIME_LABEL_TOKENS
        await chat(rt, sized(rt.tokens, room + over, "lemur-fourth"))
        conversation = await rt.core.repos.conversations.get(CID)

    assert len(model.summary_requests) == (1 if compacts else 0)
    assert conversation is not None
    assert (conversation.summary is not None) == compacts
    first_block = texts(model.chat_requests[-1]["messages"][0])[0]
    assert first_block.startswith("[Conversation context summary") == compacts


async def test_recent_pairs_are_kept_verbatim_after_compaction(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, agent=window_config(pairs=2)) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        await compacted_once(rt, model)
        stored = await rt.core.repos.messages.after(CID, 0)
        conversation = await rt.core.repos.conversations.get(CID)

    transcript = model.summary_requests[0]["messages"][0]["content"]
    assert "zebra-first" in transcript and "ans-01" in transcript
    assert "yak-second" not in transcript and "quokka-third" not in transcript
    request = model.chat_requests[-1]["messages"]
    assert_alternating(request)
    # summary, then the last two exchanges exactly as stored, then the current message
    assert [r.content for r in stored[2:6:2]] == ["yak-second", "quokka-third"]
    assert flat(request)[1:] == [("user" if r.role == "user" else "assistant", r.content) for r in stored[2:7]]
    assert conversation is not None and conversation.summary == SUMMARY_1
    assert conversation.summary_upto_message_id == stored[1].id


async def test_second_compaction_folds_previous_summary_and_only_newer_messages(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    async with running(tmp_path, fake, agent=window_config(pairs=2)) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        await compacted_once(rt, model)
        first = await rt.core.repos.conversations.get(CID)
        model.summaries.append(TextReply(SUMMARY_2, input_tokens=0))
        room = TRIGGER - await estimate_without_current(rt) - PER_MESSAGE_OVERHEAD - TIME_LABEL_TOKENS
        await chat(rt, sized(rt.tokens, room + 1, "tapir-fifth"))
        second = await rt.core.repos.conversations.get(CID)
        stored = await rt.core.repos.messages.after(CID, 0)
        count = await rt.core.repos.messages.count(CID)

    assert len(model.summary_requests) == 2
    transcript = model.summary_requests[1]["messages"][0]["content"]
    assert SUMMARY_1 in transcript
    assert "yak-second" in transcript and "ans-02" in transcript
    assert "zebra-first" not in transcript and "ans-01" not in transcript
    assert "quokka-third" not in transcript and "lemur-fourth" not in transcript
    assert first is not None and second is not None
    assert first.summary_upto_message_id == stored[1].id
    assert second.summary_upto_message_id == stored[3].id > first.summary_upto_message_id
    assert second.summary == SUMMARY_2
    assert count == 10 == len(stored)  # raw messages are never deleted
    assert blocks(model.chat_requests[-1]["messages"][0])[0]["text"].endswith(SUMMARY_2)


async def test_summary_survives_restart(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, agent=window_config()) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        await compacted_once(rt, model)

    async with running(tmp_path, fake, agent=window_config()) as rt:
        again = ScriptedModel(rt)
        fake.responder = again
        await chat(rt, "after restart")

    assert not again.summary_requests
    (request,) = again.chat_requests
    assert blocks(request["messages"][0])[0]["text"].endswith(f"\n{SUMMARY_1}")
    assert "zebra-first" not in str(request["messages"])
    assert flat(request["messages"])[-1] == ("user", "after restart")


async def test_failed_summary_call_still_answers(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, agent=window_config()) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        await three_exchanges(rt)
        model.summaries.append(TextReply("   ", input_tokens=0))  # an empty summary is refused
        room = TRIGGER - await estimate_without_current(rt) - PER_MESSAGE_OVERHEAD - TIME_LABEL_TOKENS
        reply = await chat(rt, sized(rt.tokens, room + 1, "lemur-fourth"))
        conversation = await rt.core.repos.conversations.get(CID)

    assert reply == "ans-04"
    assert conversation is not None and conversation.summary is None
    assert flat(model.chat_requests[-1]["messages"])[0] == ("user", sized(rt.tokens, 600, "zebra-first"))


# -- prompt too long ---------------------------------------------------------------------


def prompt_too_long() -> Script:
    return ErrorReply(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")


async def test_prompt_too_long_retries_with_summary_and_recent_exchanges(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, agent=window_config(pairs=2)) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        await compacted_once(rt, model)
        model.chats.extend([prompt_too_long(), TextReply("fits now", input_tokens=0)])
        reply = await chat(rt, "tapir-fifth")
        stored = await rt.core.repos.messages.after(CID, 0)

    assert reply == "fits now"
    assert len(model.summary_requests) == 1  # the emergency retry makes no summary call
    too_long, retry = model.chat_requests[-2:]
    heads = [t.split(" ")[0] for _, t in flat(too_long["messages"])]
    assert heads[1:] == ["yak-second", "ans-02", "quokka-third", "ans-03", "lemur-fourth", "ans-04", "tapir-fifth"]
    assert_alternating(retry["messages"])
    retried = flat(retry["messages"])
    assert retried[0][1].endswith(SUMMARY_1)
    assert [t.split(" ")[0] for _, t in retried[1:]] == [
        "quokka-third", "ans-03", "lemur-fourth", "ans-04", "tapir-fifth"]
    assert [(r.role, r.content) for r in stored[-2:]] == [("user", "tapir-fifth"), ("assistant", "fits now")]


async def test_prompt_too_long_retry_without_summary(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, agent=window_config(pairs=1)) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        for text in ("one", "two", "three"):
            await chat(rt, text)
        model.chats.extend([prompt_too_long(), TextReply("ok", input_tokens=0)])
        assert await chat(rt, "four") == "ok"

    assert [plain(m) for m in model.chat_requests[-1]["messages"]] == [
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "ans-03"},
        {"role": "user", "content": "four"},
    ]


async def test_prompt_too_long_twice_apologises_and_keeps_history(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, agent=window_config()) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        for text in ("one", "two", "three"):
            await chat(rt, text)
        before = [(r.id, r.role, r.content) for r in await rt.core.repos.messages.after(CID, 0)]
        model.chats.extend([prompt_too_long(), prompt_too_long()])
        reply = await chat(rt, "four")
        after = [(r.id, r.role, r.content) for r in await rt.core.repos.messages.after(CID, 0)]
        apology = rt.core.prompts.text("prompt_too_long")
        # the conversation still works afterwards
        assert await chat(rt, "five") == "ans-06"

    assert reply == apology
    assert len(model.chat_requests) == 6
    assert after[:-1] == before
    assert after[-1][1:] == ("user", "four")


# -- trimming and oversize messages -----------------------------------------------------


async def test_trimming_never_splits_a_tool_exchange(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, agent=window_config(pairs=2)) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        model.chats.extend([
            ToolUseReply("list_workspace_memory_files", {"agentId": 1}, input_tokens=0),
            TextReply("listed", input_tokens=0),
        ])
        await chat(rt, sized(rt.tokens, 650, "zebra-first"))
        # the next message pushes the request past the budget by less than ex1's user message
        room = BUDGET - await estimate_without_current(rt) - PER_MESSAGE_OVERHEAD
        await chat(rt, sized(rt.tokens, room + 50, "yak-second"))

    assert not model.summary_requests  # one exchange only: nothing to fold, so it is trimmed
    messages = model.chat_requests[-1]["messages"]
    assert "zebra-first" not in str(messages)
    assert_alternating(messages)
    for index, message in enumerate(messages):
        for block in blocks(message):
            if block["type"] == "tool_result":
                assert index > 0
                previous = messages[index - 1]
                assert previous["role"] == "assistant"
                uses = {b["id"] for b in blocks(previous) if b["type"] == "tool_use"}
                assert block["tool_use_id"] in uses


async def test_trimming_drops_oldest_whole_messages_to_fit(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, agent=window_config(pairs=2)) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        await chat(rt, sized(rt.tokens, 650, "zebra-first"))
        room = BUDGET - await estimate_without_current(rt) - PER_MESSAGE_OVERHEAD
        reply = await chat(rt, sized(rt.tokens, room + 50, "yak-second"))

    assert reply == "ans-02"
    messages = model.chat_requests[-1]["messages"]
    assert len(messages) == 1 and texts(messages[0])[0].startswith("yak-second")


async def test_oversize_message_is_answered_without_the_model(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, agent=window_config()) as rt:
        await blank_workspace(rt)
        system = await rt.agent.system_prompt(1, "Mate")
        fixed = rt.tokens.count_text(system) + rt.tokens.count_tools(owner_tools(rt))
        reply = await chat(rt, sized(rt.tokens, 2500, "huge"))
        stored = await rt.core.repos.messages.count(CID)

    assert not fake.requests
    assert "2500" in reply
    assert str(BUDGET - fixed - PER_MESSAGE_OVERHEAD) in reply
    assert reply == rt.core.prompts.text("too_long", tokens=2500, budget=BUDGET - fixed - PER_MESSAGE_OVERHEAD)
    assert stored == 0
