"""The working window: a conversation is compacted past `working-tokens`, whatever the model's limit.

Through the whole pipeline: the real SDK talks to the fake Messages API; the model's limit is
set far above the working window, so only the working window can make a fold happen.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.llm.tokens import PER_MESSAGE_OVERHEAD, TIME_LABEL_TOKENS
from bot.app.runtime import Runtime
from tests.support.fakes.anthropic import FakeAnthropic, TextReply
from tests.support.messages import assert_alternating, flat, texts
from tests.support.runtime import chat, running
from tests.support.window import CID, SUMMARY_1, ScriptedModel, blank_workspace, sized

WORKING = 1000
LIMIT = 200_000  # the model's limit: its 0.75 share (150 000) is never reached here


def working_config(*, working: int = WORKING, limit: int = LIMIT, pairs: int = 1) -> dict[str, Any]:
    return {"conversation": {"window": {
        "default-max-input-tokens": limit, "compact-trigger-ratio": 0.75,
        "preserve-recent-pairs": pairs, "working-tokens": working}}}


async def conversation_tokens(rt: Runtime) -> int:
    """The conversation part of the next request before its new message: summary + history."""
    conversation = await rt.core.repos.conversations.get(CID)
    assert conversation is not None
    total = rt.tokens.count_message(rt.window.summary_message(conversation.summary)) if conversation.summary else 0
    history = await rt.core.repos.messages.after(CID, conversation.summary_upto_message_id)
    return total + sum(r.token_count + PER_MESSAGE_OVERHEAD for r in history)


async def fill_to_the_edge(rt: Runtime, over: int) -> None:
    """Two exchanges (the first big), then a message that brings the conversation to the working
    window plus `over` tokens."""
    await chat(rt, sized(rt.tokens, 500, "zebra-first"))
    await chat(rt, "yak-second")
    assert rt.tokens.factor(rt.agent.model) == 1.0  # the fake reports no usage: counts are exact
    room = WORKING - await conversation_tokens(rt) - PER_MESSAGE_OVERHEAD - TIME_LABEL_TOKENS
    await chat(rt, sized(rt.tokens, room + over, "lemur-third"))


async def compacted_once(rt: Runtime, fake: FakeAnthropic) -> ScriptedModel:
    """A blank workspace and a conversation one token past the working window: one compaction,
    summarised as SUMMARY_1."""
    model = ScriptedModel(rt)
    fake.responder = model
    await blank_workspace(rt)
    model.summaries.append(TextReply(SUMMARY_1, input_tokens=0))
    await fill_to_the_edge(rt, 1)
    return model


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@pytest.mark.parametrize(("over", "compacts"), [(0, False), (1, True)])
async def test_compaction_triggers_past_the_working_window(
    tmp_path: Path, fake: FakeAnthropic, over: int, compacts: bool,
) -> None:
    async with running(tmp_path, fake, agent=working_config()) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        await fill_to_the_edge(rt, over)
        conversation = await rt.core.repos.conversations.get(CID)

    assert len(model.summary_requests) == (1 if compacts else 0)
    assert conversation is not None and (conversation.summary is not None) == compacts
    first_block = texts(model.chat_requests[-1]["messages"][0])[0]
    assert first_block.startswith("[Conversation context summary") == compacts


async def test_compaction_keeps_the_recent_turns_within_the_working_window(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    async with running(tmp_path, fake, agent=working_config(pairs=1)) as rt:
        model = await compacted_once(rt, fake)
        stored = await rt.core.repos.messages.after(CID, 0)
        after = await conversation_tokens(rt)

    request = model.chat_requests[-1]["messages"]
    assert_alternating(request)
    transcript = model.summary_requests[0]["messages"][0]["content"]
    assert "zebra-first" in transcript and "yak-second" not in transcript
    # the summary, then the last exchange word for word, then the new message
    assert flat(request)[0][1].endswith(SUMMARY_1)
    assert flat(request)[1:] == [(r.role, r.content) for r in stored[2:5]]
    assert after <= WORKING


async def test_the_turn_after_a_compaction_reads_no_history_back(tmp_path: Path, fake: FakeAnthropic) -> None:
    """A compaction trims the window cached in memory to what follows the new cut-off instead
    of dropping it: the next turn sends exactly the stored window without reading it again."""
    async with running(tmp_path, fake, agent=working_config(pairs=1)) as rt:
        model = await compacted_once(rt, fake)
        conversation = await rt.core.repos.conversations.get(CID)
        assert conversation is not None and conversation.summary == SUMMARY_1
        stored = await rt.core.repos.messages.after(CID, conversation.summary_upto_message_id)
        cached = rt.window._histories[CID]
        assert cached.cutoff == conversation.summary_upto_message_id
        assert [(i.id, i.role, i.content) for i in cached.items] == [(r.id, r.role, r.content) for r in stored]

        reads: list[int] = []
        page = rt.core.repos.messages.window_page

        async def counted(*args: Any, **kwargs: Any) -> Any:
            reads.append(1)
            return await page(*args, **kwargs)

        rt.core.repos.messages.window_page = counted  # type: ignore[method-assign]
        await chat(rt, "okapi-fourth")

    assert reads == []
    assert len(model.summary_requests) == 1
    sent = flat(model.chat_requests[-1]["messages"])
    assert sent[0][1].endswith(SUMMARY_1)
    assert sent[1:-1] == [(r.role, r.content) for r in stored]
    assert sent[-1][1].endswith("okapi-fourth")


async def test_the_models_limit_still_holds_under_a_larger_working_window(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    """A working window above the model's limit does not lift it: the request is compacted at
    the limit's share, and what does not fit is trimmed."""
    limit = 2300  # room for the tool definitions and the blank workspace
    async with running(tmp_path, fake, agent=working_config(working=100_000, limit=limit, pairs=1)) as rt:
        model = ScriptedModel(rt)
        fake.responder = model
        await blank_workspace(rt)
        await chat(rt, sized(rt.tokens, 600, "zebra-first"))
        await chat(rt, sized(rt.tokens, 600, "yak-second"))
        reply = await chat(rt, sized(rt.tokens, 600, "quokka-third"))
        last = model.chat_requests[-1]
        # the request as the window counts it: system, tools, each message's text and framing
        used = rt.tokens.count_text(await rt.agent.system_prompt(1, "Mate")) + rt.tokens.count_tools(last["tools"])
        used += sum(rt.tokens.count_text(t) + PER_MESSAGE_OVERHEAD for _, t in flat(last["messages"]))

    assert reply == "ans-03"
    assert len(model.summary_requests) == 1  # at 0.75 x 2300, far below the working window
    sent = [t for _, t in flat(model.chat_requests[-1]["messages"])]
    assert not any(t.startswith("zebra-first") for t in sent)
    assert used <= limit
