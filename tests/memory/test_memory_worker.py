from __future__ import annotations

import asyncio
from pathlib import Path

from bot.app.core import open_core
from bot.core.config import LlmConfig
from bot.llm import AnthropicClient
from bot.core.retry import Backoff
from memory.events import ConversationCompletedEvent
from memory.extraction.summarization import MemorySummarizationService
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.memory_env import (
    CONVERSATION, ManualClock, MemoryEnv, add_messages, between, chat, memory_env, memory_reply, user_prompt,
    worker_running,
)


def completed(count: int, text: str = "please note the project deadline") -> ConversationCompletedEvent:
    return ConversationCompletedEvent(1, CONVERSATION, text, "noted", count, "console")


async def test_publish_returns_before_the_model_answers(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path) as env, worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(2))
        env.fake.reply_text(memory_reply(daily="- deadline"), delay=0.3)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await worker.publish(completed(4), ids[-1])
        returned = loop.time()
        print(f"publish took {(returned - started) * 1000:.2f} ms")
        assert await worker.drain(5)
        (request,) = env.fake.requests
        assert returned <= request.time  # back before the request even reached the model
        assert await env.core.repos.memory_pending.get(CONVERSATION) is None
        assert (await env.core.workspace.read_text(1, "memory/2026-04-01.md"))[0].endswith("- deadline\n")


async def test_skipped_event_is_logged_not_queued(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path) as env, worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(1))
        await worker.publish(completed(2, "ok"), ids[-1])
        assert await worker.drain(5)
        assert await env.core.repos.memory_pending.all() == []
        assert env.fake.requests == []


async def test_cooldown_skip_becomes_one_deferred_run_covering_the_tail(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path, clock=clock, **{"cooldown-minutes": 5}) as env, \
            worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(2))
        env.fake.reply_text(memory_reply(daily="- first"))
        await worker.publish(completed(4), ids[-1])
        assert await worker.drain(5)
        for start in (2, 3):  # two more exchanges inside the cooldown
            ids = await env.core.repos.messages.add_many(
                CONVERSATION, [(role, text, 1) for role, text in chat(1, start)]
            )
            await worker.publish(completed(2 * start + 2), ids[-1])
            assert await worker.drain(5)
        assert len(env.fake.requests) == 1
        pending = await env.core.repos.memory_pending.get(CONVERSATION)
        assert pending is not None and pending.upto_message_id == ids[-1]
        env.fake.reply_text(memory_reply(daily="- tail"))
        clock.advance(5 * 60)
        assert await worker.drain(5)
        await asyncio.sleep(0.05)
        requests = env.fake.messages_requests()
        assert len(requests) == 2
        assert between(user_prompt(requests[1]), "<transcript>\n", "\n</transcript>").split("\n") == [
            "User: question number 2", "Assistant: answer number 2",
            "User: question number 3", "Assistant: answer number 3",
        ]
        conversation = await env.core.repos.conversations.get(CONVERSATION)
        assert conversation is not None and conversation.memory_upto_message_id == ids[-1]
        assert await env.core.repos.memory_pending.all() == []


async def test_busy_agent_skips_manual_run_and_defers_the_trigger(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path) as env, worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(2))
        env.fake.reply_text(memory_reply(daily="- first"), delay=0.3)
        await worker.publish(completed(4), ids[-1])
        while not env.fake.requests:
            await asyncio.sleep(0.01)
        busy = await worker.summarize_now(1, CONVERSATION)
        assert (busy.status, busy.reason.split(":")[0]) == ("skipped", "busy")
        ids = await env.core.repos.messages.add_many(CONVERSATION, [(r, t, 1) for r, t in chat(1, 2)])
        env.fake.reply_text(memory_reply(daily="- second"))
        await worker.publish(completed(6), ids[-1])  # lock held: deferred, not dropped
        assert await worker.drain(5)
        requests = env.fake.messages_requests()
        assert len(requests) == 2
        assert "User: question number 2" in between(user_prompt(requests[1]), "<transcript>", "</transcript>")
        note, _ = await env.core.workspace.read_text(1, "memory/2026-04-01.md")
        assert note == "# 2026-04-01\n\n- first\n\n- second\n"


async def test_manual_run_bypasses_the_cooldown(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path, clock=clock, **{"cooldown-minutes": 5}) as env, \
            worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(2))
        env.fake.reply_text(memory_reply(should_update=False))
        await worker.publish(completed(4), ids[-1])
        assert await worker.drain(5)
        await env.core.repos.messages.add_many(CONVERSATION, [(r, t, 1) for r, t in chat(1, 2)])
        env.fake.reply_text(memory_reply(memory="# Memory\n- now"))
        outcome = await worker.summarize_now(1, CONVERSATION)
        assert (outcome.status, outcome.files) == ("completed", ("MEMORY.md",))
        assert len(env.fake.requests) == 2


async def test_a_fold_only_records_the_folded_range_and_the_worker_analyses_it_later(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path, clock=clock, **{"cooldown-minutes": 5}) as env, \
            worker_running(env, clock) as worker:
        ids = await add_messages(env.core, chat(4))
        env.fake.reply_text(memory_reply(should_update=False))
        await worker.publish(completed(8), ids[1])  # starts the cooldown
        assert await worker.drain(5)
        env.fake.reply_text(memory_reply(daily="- folded part"))
        await worker.record_fold(1, CONVERSATION, ids[5])
        calls_after_fold = len(env.fake.messages_requests())
        row = await env.core.repos.memory_pending.get(CONVERSATION)
        clock.advance(300)
        assert await worker.drain(5)
        requests = env.fake.messages_requests()
        conversation = await env.core.repos.conversations.get(CONVERSATION)
    assert calls_after_fold == 1  # the fold made no model call: the reply never waits on one
    assert row is not None and row.upto_message_id == ids[5]
    assert len(requests) == 2
    transcript = between(user_prompt(requests[1]), "<transcript>\n", "\n</transcript>")
    assert transcript.split("\n")[-1] == "Assistant: answer number 2"
    assert conversation is not None and conversation.memory_upto_message_id == ids[5]


async def test_start_up_records_conversations_left_without_a_pending_row(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path, clock=clock) as env:
        ids = await add_messages(env.core, chat(2))  # a reply stored, then a crash before its event
        await add_messages(env.core, [("user", "hi"), ("assistant", "hello")], conversation_id="console:short")
        env.fake.reply_text(memory_reply(daily="- recovered"))
        async with worker_running(env, clock) as worker:
            assert await worker.drain(5)
            short = await env.core.repos.memory_pending.get("console:short")
        conversation = await env.core.repos.conversations.get(CONVERSATION)
        note = await env.core.workspace.read_text(1, "memory/2026-04-01.md")
    assert conversation is not None and conversation.memory_upto_message_id == ids[-1]
    assert "- recovered" in note[0]
    assert short is None  # the pre-checks still apply: two messages are too few
    assert len(env.fake.messages_requests()) == 1


async def test_invalid_json_gives_up_after_three_durable_attempts(tmp_path: Path) -> None:
    clock = ManualClock()
    async with memory_env(tmp_path) as env, worker_running(env, clock, retry=Backoff(30.0, 60.0, attempts=3)) as worker:
        ids = await add_messages(env.core, chat(2))
        for _ in range(3):
            env.fake.reply_text("no json here")
        await worker.publish(completed(4), ids[-1])
        assert await worker.drain(5)
        row = await env.core.repos.memory_pending.get(CONVERSATION)
        assert row is not None and row.attempts == 1 and row.last_error and "invalid JSON" in row.last_error
        clock.advance(30)
        assert await worker.drain(5)
        clock.advance(60)
        assert await worker.drain(5)
        runs = await env.core.repos.memory_runs.for_conversation(CONVERSATION)
        assert len(env.fake.requests) == 3
        assert await env.core.repos.memory_pending.all() == []
        assert [r.status for r in runs] == ["failed"] * 4
        assert runs[-1].reason == "gave up after 3 attempts"
        assert await env.core.workspace.get(1, "memory/2026-04-01.md") is None


async def test_pending_event_survives_a_restart(tmp_path: Path) -> None:
    clock = ManualClock()
    config = make_config(tmp_path, memory={"cooldown-minutes": 0})
    async with FakeAnthropic() as fake:
        llm_config = LlmConfig(api_key="test-key", base_url=fake.url, max_retries=0)
        fake.reply_text(memory_reply(memory="# Memory\n- never written"), delay=2)
        async with open_core(config) as core, AnthropicClient(llm_config) as llm:
            env = MemoryEnv(core, fake, llm, MemorySummarizationService(
                core.config.mate, core.repos, core.workspace, llm, core.prompts, clock))
            ids = await add_messages(core, chat(2))
            async with worker_running(env, clock) as worker:
                await worker.publish(completed(4), ids[-1])
                while not fake.requests:
                    await asyncio.sleep(0.01)
            # The daemon stopped mid-analysis: the row is still there.
            assert await core.repos.memory_pending.get(CONVERSATION) is not None
        fake.reply_text(memory_reply(memory="# Memory\n- after restart"))
        async with open_core(config) as core, AnthropicClient(llm_config) as llm:
            env = MemoryEnv(core, fake, llm, MemorySummarizationService(
                core.config.mate, core.repos, core.workspace, llm, core.prompts, clock))
            async with worker_running(env, clock) as worker:
                assert await worker.drain(5)
            assert await core.repos.memory_pending.all() == []
            assert (await core.workspace.read_text(1, "MEMORY.md"))[0] == "# Memory\n- after restart\n"
            statuses = [r.status for r in await core.repos.memory_runs.for_conversation(CONVERSATION)]
            assert statuses == ["failed", "completed"]  # the interrupted attempt is not left "running"


async def test_the_cooldown_is_per_agent_so_a_second_conversation_waits_for_it(tmp_path: Path) -> None:
    other = "console:other"
    clock = ManualClock()
    async with memory_env(tmp_path, clock=clock, **{"cooldown-minutes": 5}) as env, \
            worker_running(env, clock) as worker:
        first = await add_messages(env.core, chat(2))
        second = await add_messages(env.core, chat(2, 10), conversation_id=other)
        env.fake.reply_text(memory_reply(daily="- first"))
        await worker.publish(completed(4), first[-1])
        assert await worker.drain(5)
        await worker.publish(ConversationCompletedEvent(1, other, "please note the other deadline", "noted", 4,
                                                        "console"), second[-1])
        assert await worker.drain(5)
        assert len(env.fake.requests) == 1  # the same agent: the other conversation waits out its cooldown
        pending = await env.core.repos.memory_pending.get(other)
        assert pending is not None and pending.upto_message_id == second[-1]
        env.fake.reply_text(memory_reply(daily="- other"))
        clock.advance(5 * 60)
        for _ in range(200):  # the deferred run wakes on the clock; wait for its request, bounded
            if await env.core.repos.memory_pending.get(other) is None:
                break
            await asyncio.sleep(0.02)
        requests = env.fake.messages_requests()
        assert len(requests) == 2
        assert "question number 10" in user_prompt(requests[1])


def test_config_yaml_says_the_cooldown_is_per_agent() -> None:
    config_yaml = Path(__file__).resolve().parents[2] / "config.yaml"
    (line,) = [line for line in config_yaml.read_text(encoding="utf-8").splitlines() if "cooldown-minutes:" in line]
    comment = line.split("#", 1)[1]
    assert "per agent" in comment and "per conversation" not in comment
