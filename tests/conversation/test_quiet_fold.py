"""A direct conversation that goes quiet is folded through the prompt cache its last turn left warm,
so the next session starts from the summary and the last exchanges (the real Anthropic client
against the fake Messages API, whose cache keeps time by the test's clock)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bot.app.runtime import Runtime, open_runtime
from bot.conversation.quiet_fold import QuietFolds
from bot.llm.chat_prefix import ChatPrefixes
from bot.core.records import ConversationRecord
from bot.llm import AnthropicClient
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, ToolUseReply
from tests.support.memory_env import ManualClock
from tests.support.messages import blocks
from tests.support.runtime import chat

FOLD_MARK = "You compress the earlier part of a conversation"
SUMMARY = "The user plans a trip to Kyoto in May and keeps bees in Lisbon."
ANSWER = " ".join(f"word{i}" for i in range(180))  # a long answer: the history is worth folding


def last_text(request: RecordedRequest) -> str:
    return "".join(str(b.get("text", "")) for b in blocks(request.body["messages"][-1]))


def unmarked(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each message's blocks without their cache_control breakpoints."""
    return [[{k: v for k, v in b.items() if k != "cache_control"} for b in blocks(m)] for m in messages]


def is_fold(request: RecordedRequest) -> bool:
    return FOLD_MARK in last_text(request)


class Model:
    """Answers chat turns at length and a fold with `fold` (a summary by default)."""

    def __init__(self) -> None:
        self.fold: Script = TextReply(SUMMARY)

    def __call__(self, request: RecordedRequest) -> Script:
        return self.fold if is_fold(request) else TextReply(ANSWER)


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@asynccontextmanager
async def running(tmp_path: Path, fake: FakeAnthropic, clock: ManualClock,
                  **window: Any) -> AsyncIterator[Runtime]:
    # 50 minutes, as `auto` picks on a hosted API (the fake stands in for one on 127.0.0.1).
    window = {"fold-after-quiet-minutes": 50, **window}
    config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
                         agent={"conversation": {"window": window}})
    fake.now = lambda: clock.now.timestamp()
    async with AnthropicClient(config.mate.llm) as client, \
            open_runtime(config, llm=client, clock=clock, sleep=clock.sleep) as rt:
        yield rt


async def session(rt: Runtime, clock: ManualClock, turns: int) -> None:
    for index in range(turns):
        if index:
            clock.advance(60)
        await chat(rt, f"Message {index}: tell me more about bees and travel plans.")


async def wait_quiet(rt: Runtime, clock: ManualClock, minutes: float) -> None:
    clock.advance(minutes * 60)
    assert await rt.router.drain(10)


async def the_conversation(rt: Runtime) -> ConversationRecord:
    (activity,) = await rt.core.repos.conversations.recent_activity(1)
    return activity.conversation


def folds(fake: FakeAnthropic) -> list[RecordedRequest]:
    return [r for r in fake.requests if r.path == "/v1/messages" and is_fold(r)]


async def test_a_quiet_conversation_is_folded_through_its_warm_cache_and_the_next_session_starts_from_the_summary(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    fake.responder = Model()
    clock = ManualClock()
    async with running(tmp_path, fake, clock) as rt:
        await session(rt, clock, 8)
        last_turn = fake.requests[-1]
        await wait_quiet(rt, clock, 49)
        assert folds(fake) == []  # not quiet long enough yet
        await wait_quiet(rt, clock, 2)
        (fold,) = folds(fake)
        conversation = await the_conversation(rt)
        messages = await rt.core.repos.messages.latest(conversation.id, 4)
        clock.advance(2 * 3600)  # the next session
        await chat(rt, "I'm back: what did we plan?")
        next_turn = fake.requests[-1]

    # The fold repeats the last turn's prefix byte for byte and reads it from the cache.
    assert fold.body["tools"] == last_turn.body["tools"] and fold.body["system"] == last_turn.body["system"]
    shared = len(last_turn.body["messages"]) - 1  # all but the last turn's own message
    assert unmarked(fold.body["messages"][:shared]) == unmarked(last_turn.body["messages"][:shared])
    assert fold.usage is not None and fold.usage["cache_read_input_tokens"] > 2000
    assert fold.usage["input_tokens"] < 400
    assert conversation.summary == SUMMARY
    assert conversation.summary_upto_message_id == messages[0].id - 1  # the last two exchanges stay
    # The next session: the summary, then the last two exchanges word for word, then the new message.
    sent = next_turn.body["messages"]
    assert SUMMARY in "".join(str(b.get("text", "")) for b in blocks(sent[0]))
    assert len(sent) == 4 + 1  # the summary and the first kept user message are one user turn
    assert "Message 6" in str(sent) and "Message 5" not in str(sent)


@pytest.mark.parametrize("case", ["one turn: written for 5 minutes", "quiet folds off", "a turn came meanwhile"])
async def test_no_fold_without_a_warm_cache_when_turned_off_or_while_the_talk_goes_on(
    tmp_path: Path, fake: FakeAnthropic, case: str,
) -> None:
    fake.responder = Model()
    clock = ManualClock()
    window = {"fold-after-quiet-minutes": 0} if case == "quiet folds off" else {}
    async with running(tmp_path, fake, clock, **window) as rt:
        if case.startswith("one turn"):
            await chat(rt, "Message 0: " + ANSWER)  # much to fold, but its cache lives 5 minutes
        else:
            await session(rt, clock, 8)
        if case == "a turn came meanwhile":
            await wait_quiet(rt, clock, 40)
            await chat(rt, "One more thing about the bees.")
            await wait_quiet(rt, clock, 40)  # 80 minutes after the first quiet began, 40 after the last turn
            assert folds(fake) == []
            await wait_quiet(rt, clock, 11)
            assert len(folds(fake)) == 1
            return
        await wait_quiet(rt, clock, 51)
        assert (await the_conversation(rt)).summary is None

    assert folds(fake) == []


@pytest.mark.parametrize("answer", [TextReply("   "), ToolUseReply("list_workspace_memory_files", {"agentId": 1})])
async def test_a_fold_answered_without_a_summary_changes_nothing(
    tmp_path: Path, fake: FakeAnthropic, answer: Script,
) -> None:
    model = Model()
    model.fold = answer
    fake.responder = model
    clock = ManualClock()
    async with running(tmp_path, fake, clock) as rt:
        await session(rt, clock, 8)
        await wait_quiet(rt, clock, 51)
        assert len(folds(fake)) == 1
        conversation = await the_conversation(rt)
        clock.advance(2 * 3600)
        assert await chat(rt, "Still there?") == ANSWER

    assert conversation.summary is None and conversation.summary_upto_message_id == 0
    assert "Message 0" in str(fake.requests[-1].body["messages"])  # the whole history, as before


async def test_a_group_or_a_closed_daemon_counts_no_quiet_time(tmp_path: Path, fake: FakeAnthropic) -> None:
    fake.responder = Model()
    clock = ManualClock()
    async with running(tmp_path, fake, clock) as rt:
        await chat(rt, "Hello there, this is a direct chat.")
        conversation = await the_conversation(rt)
        quiet = QuietFolds(rt.window, ChatPrefixes(), rt.core.repos, model="m", quiet_minutes=50, clock=clock,
                           sleep=clock.sleep)
        quiet.heard(replace(conversation, is_group=True), lambda key: nullcontext())
        assert quiet.waiting == 0  # a group's prompt changes with who speaks: nothing to fold through
        quiet.heard(conversation, lambda key: nullcontext())
        assert quiet.waiting == 1
        await quiet.close()
        assert quiet.waiting == 0
        quiet.heard(conversation, lambda key: nullcontext())
        assert quiet.waiting == 0


@pytest.mark.parametrize("change", ["/new", "/incognito"])
async def test_a_conversation_ended_or_changed_since_its_last_turn_is_not_folded(
    tmp_path: Path, fake: FakeAnthropic, change: str,
) -> None:
    fake.responder = Model()
    clock = ManualClock()
    async with running(tmp_path, fake, clock) as rt:
        await session(rt, clock, 8)
        quiet = 51.0
        if change == "/new":
            clock.advance(20 * 60)
            await chat(rt, "/new")  # archived: the timer of its last turn finds nothing to fold
            quiet -= 20
        else:  # three turns off the record, deleted when it ends: the cache holds what no longer is
            await chat(rt, "/incognito on")
            for index in range(3):
                clock.advance(60)
                await chat(rt, f"Secret {index}: something off the record, about bees.")
            await chat(rt, "/incognito off")
        await wait_quiet(rt, clock, quiet)  # 51 minutes after the last turn

    assert folds(fake) == []


async def test_folds_stop_after_three_in_a_row_miss_the_cache(tmp_path: Path, fake: FakeAnthropic) -> None:
    fake.responder = Model()
    clock = ManualClock()
    async with running(tmp_path, fake, clock) as rt:
        for sender in ("ana", "ben", "cleo"):
            for index in range(8):
                clock.advance(60)
                await chat(rt, f"Message {index}: tell me more about bees and travel plans.", sender=sender)
        fake.cache.enabled = False  # the server forgets: every fold reads nothing from a cache
        for minutes in (34, 8, 8):  # to each one's 50 quiet minutes (their last turns were 8 minutes apart)
            await wait_quiet(rt, clock, minutes)
        assert len(folds(fake)) == 3
        fake.cache.enabled = True
        await session(rt, clock, 8)
        await wait_quiet(rt, clock, 51)

    assert len(folds(fake)) == 3  # no fourth
