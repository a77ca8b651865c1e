"""Extraction after a pause (S34): the worker waits until a conversation has been quiet for
idle-minutes, unless enough unanalysed messages gathered, a fold, /new or an explicit
"remember" asks for it now; the cooldown stays the minimum gap between two runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bot.app.runtime import MemoryServices, Runtime
from bot.core.clock import iso
from memory.events import ConversationCompletedEvent
from tests.support.clock import SteppedClock
from tests.support.eventually import eventually
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, is_memory_request
from tests.support.memory_env import (
    CONVERSATION, NOON, ManualClock, add_messages, between, chat, memory_env, memory_reply, user_prompt,
    worker_running,
)
from tests.support.runtime import chat as say
from tests.support.runtime import running

MINUTE = 60.0


def completed(count: int, text: str = "please note the project deadline",
              conversation_id: str = CONVERSATION) -> ConversationCompletedEvent:
    return ConversationCompletedEvent(1, conversation_id, text, "noted", count, "console")


def transcript(body: dict[str, object]) -> list[str]:
    return between(user_prompt(body), "<transcript>\n", "\n</transcript>").split("\n")


async def test_no_extraction_before_the_pause_and_a_new_exchange_starts_it_again(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path, clock=clock, **{"idle-minutes": 10}) as env, \
            worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(2))
        await worker.publish(completed(4), ids[-1])
        assert await worker.drain(5)
        clock.advance(9 * MINUTE)
        assert await worker.drain(5)
        assert env.fake.requests == []  # nine quiet minutes: still waiting
        ids = await env.core.repos.messages.add_many(CONVERSATION, [(r, t, 1) for r, t in chat(1, 2)])
        await worker.publish(completed(6), ids[-1])  # the talk goes on: the pause starts again
        clock.advance(9 * MINUTE)
        assert await worker.drain(5)
        requests_before_the_pause = len(env.fake.requests)
        env.fake.reply_text(memory_reply(daily="- the deadline"))
        clock.advance(MINUTE)  # ten quiet minutes after the last exchange
        assert await worker.drain(5)
        requests = env.fake.messages_requests()
        pending = await env.core.repos.memory_pending.all()
    assert requests_before_the_pause == 0
    assert len(requests) == 1  # one extraction for both exchanges
    assert transcript(requests[0]) == [
        "User: question number 0", "Assistant: answer number 0", "User: question number 1",
        "Assistant: answer number 1", "User: question number 2", "Assistant: answer number 2",
    ]
    assert pending == []


async def test_a_short_reply_the_checks_skip_still_counts_as_talk(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path, clock=clock, **{"idle-minutes": 10}) as env, \
            worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(2))
        await worker.publish(completed(4), ids[-1])
        clock.advance(8 * MINUTE)
        ids = await env.core.repos.messages.add_many(CONVERSATION, [("user", "ok", 1), ("assistant", "great", 1)])
        await worker.publish(completed(6, "ok"), ids[-1])  # too short to analyse on its own
        clock.advance(8 * MINUTE)
        assert await worker.drain(5)
        early = len(env.fake.requests)
        env.fake.reply_text(memory_reply(should_update=False))
        clock.advance(2 * MINUTE)
        assert await worker.drain(5)
        late = len(env.fake.requests)
    assert (early, late) == (0, 1)


async def test_enough_unanalysed_messages_run_at_once(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path, clock=clock, **{"idle-minutes": 10, "max-transcript-messages": 6}) as env, \
            worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(2))
        await worker.publish(completed(4), ids[-1])
        assert await worker.drain(5)
        four = len(env.fake.requests)
        env.fake.reply_text(memory_reply(daily="- six messages"))
        ids = await env.core.repos.messages.add_many(CONVERSATION, [(r, t, 1) for r, t in chat(1, 2)])
        await worker.publish(completed(6), ids[-1])  # six unanalysed: one extraction's worth
        assert await worker.drain(5)
        requests = env.fake.messages_requests()
        conversation = await env.core.repos.conversations.get(CONVERSATION)
    assert four == 0
    assert len(requests) == 1 and len(transcript(requests[0])) == 6
    assert conversation is not None and conversation.memory_upto_message_id == ids[-1]


@pytest.mark.parametrize("text", ["remember that my sister is called Ana", "记住我喜欢喝咖啡"])
async def test_an_explicit_remember_runs_at_once(tmp_path: Path, text: str) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path, clock=clock, **{"idle-minutes": 10}) as env, \
            worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(2))
        await worker.publish(completed(4), ids[-1])
        assert await worker.drain(5)
        waiting = len(env.fake.requests)
        ids = await env.core.repos.messages.add_many(CONVERSATION, [("user", text, 1), ("assistant", "noted", 1)])
        env.fake.reply_text(memory_reply(profile="# User profile\n- fact kept"))
        await worker.publish(completed(6, text), ids[-1])
        assert await worker.drain(5)
        requests = env.fake.messages_requests()
        profile, _ = await env.core.workspace.read_text(1, "PROFILE.md")
    assert waiting == 0
    assert len(requests) == 1 and transcript(requests[0])[-2:] == [f"User: {text}", "Assistant: noted"]
    assert "- fact kept" in profile


async def test_a_fold_runs_without_the_pause(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path, clock=clock, **{"idle-minutes": 10}) as env, \
            worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(4))
        await worker.publish(completed(8), ids[-1])
        assert await worker.drain(5)
        waiting = len(env.fake.requests)
        env.fake.reply_text(memory_reply(daily="- folded part"))
        await worker.record_fold(1, CONVERSATION, ids[-1])  # compaction is about to fold them
        assert await worker.drain(5)
        requests = env.fake.messages_requests()
    assert waiting == 0
    assert len(requests) == 1 and transcript(requests[0])[-1] == "Assistant: answer number 3"


async def test_the_cooldown_stays_the_minimum_gap_between_runs(tmp_path: Path) -> None:
    clock = ManualClock()
    other = "console:other"
    badge, desk = "remember my badge number is 42", "remember that my desk is 7B"
    async with memory_env(tmp_path, clock=clock, **{"idle-minutes": 2, "cooldown-minutes": 5}) as env, \
            worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(2))
        await worker.publish(completed(4), ids[-1])  # waits for its pause: until minute 2
        assert await worker.drain(5)
        clock.advance(MINUTE)
        other_ids = await add_messages(env.core, [("user", badge), ("assistant", "ok")], conversation_id=other)
        env.fake.reply_text(memory_reply(daily="- badge 42"))
        await worker.publish(completed(2, badge, other), other_ids[-1])  # at once: the cooldown starts at minute 1
        assert await worker.drain(5)
        first = len(env.fake.requests)
        clock.advance(2 * MINUTE)  # minute 3: the first conversation's pause is over, the cooldown is not
        assert await worker.drain(5)
        after_the_pause = len(env.fake.requests)
        other_ids = await env.core.repos.messages.add_many(other, [("user", desk, 1), ("assistant", "ok", 1)])
        await worker.publish(completed(4, desk, other), other_ids[-1])  # a "remember" waits for it too
        assert await worker.drain(5)
        remembered_inside = len(env.fake.requests)
        env.fake.reply_text(memory_reply(daily="- the deadline"))
        env.fake.reply_text(memory_reply(daily="- desk 7B"))
        clock.advance(3 * MINUTE)  # minute 6: five after the first run
        assert await worker.drain(5)
        requests = len(env.fake.requests)
        pending = await env.core.repos.memory_pending.all()
    assert (first, after_the_pause, remembered_inside, requests) == (1, 1, 1, 3)
    assert pending == []


async def test_rows_found_at_start_up_run_without_waiting_for_a_pause(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path, clock=clock, **{"idle-minutes": 10}) as env:
        ids = await add_messages(env.core, chat(2))
        # Left by the last run of the daemon, due now.
        await env.core.repos.memory_pending.upsert(CONVERSATION, 1, ids[-1], "console", due_time=iso(clock()))
        env.fake.reply_text(memory_reply(daily="- recovered"))
        async with worker_running(env, clock) as worker:
            assert await worker.drain(5)
        requests = env.fake.messages_requests()
        pending = await env.core.repos.memory_pending.all()
    assert len(requests) == 1 and pending == []


# -- through the router and /new -----------------------------------------------------------------


def _answers(fact: str) -> Callable[[RecordedRequest], Script | None]:
    def respond(recorded: RecordedRequest) -> Script | None:
        return TextReply(memory_reply(daily=fact)) if is_memory_request(recorded) else None  # chat: "ok"
    return respond


@asynccontextmanager
async def _chat_with_worker(tmp_path: Path, fact: str) -> AsyncIterator[tuple[Runtime, FakeAnthropic, MemoryServices]]:
    """A runtime whose memory worker runs (idle-minutes 10), its model answering extractions with `fact`."""
    async with FakeAnthropic() as fake, running(tmp_path, fake, memory_worker=True, clock=SteppedClock(NOON),
                                                memory={"idle-minutes": 10}) as rt:
        fake.responder = _answers(fact)
        services = rt.memory_services
        assert services is not None
        loop = asyncio.create_task(services.worker.run(), name="memory-worker")
        try:
            yield rt, fake, services
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)


async def test_new_extracts_the_closed_conversation_without_waiting(tmp_path: Path) -> None:
    async with _chat_with_worker(tmp_path, "- the launch venue") as (rt, fake, services):
        await say(rt, "the product launch is on Friday the 12th")
        await say(rt, "and the venue is the old harbour hall")
        assert await rt.router.drain(5)  # the exchange's event is published after the reply
        assert await services.worker.drain(5)
        before = [r for r in fake.requests if is_memory_request(r)]
        waiting = await rt.core.repos.memory_pending.get(CONVERSATION)
        await say(rt, "/new")
        await eventually(lambda: any(is_memory_request(r) for r in fake.requests), "the extraction at /new",
                         timeout=10)
        assert await services.worker.drain(5)
        pending = await rt.core.repos.memory_pending.all()
        extraction = [r for r in fake.requests if is_memory_request(r)]
    assert before == [] and waiting is not None  # recorded, waiting for a pause
    assert len(extraction) == 1
    assert "old harbour hall" in user_prompt(extraction[0].body)
    assert pending == []


async def test_an_explicit_remember_through_the_router_is_extracted_at_once(tmp_path: Path) -> None:
    async with _chat_with_worker(tmp_path, "- sister Ana") as (rt, fake, services):
        await say(rt, "remember that my sister is called Ana")
        await eventually(lambda: any(is_memory_request(r) for r in fake.requests), "the extraction", timeout=10)
        assert await services.worker.drain(5)
        note, _ = await rt.core.workspace.read_text(1, "memory/2026-04-01.md")
    assert "- sister Ana" in note
