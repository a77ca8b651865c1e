"""LLM faults through the real SDK and the fake Messages API: retried, apologised for, or recorded (SPEC S5, S6, S14)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bot.llm import AnthropicClient
from bot.core.retry import MEMORY_MODEL_CALL, PENDING_EXTRACTION
from bot.app.runtime import Runtime, open_runtime
from channels.base import InboundMessage
from memory.workspace.tool import WRITE_TOOL
from memory.extraction.summarization import MemorySummarizationService
from memory.worker import MemoryWorker
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, is_memory_extraction

CID = "console:me"
NO_WAITS = replace(MEMORY_MODEL_CALL, base=0.0, maximum=0.0)  # extraction's tries, without the waits


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@asynccontextmanager
async def running(tmp_path: Path, fake: FakeAnthropic, *, memory_worker: bool = False,
                  llm: dict[str, Any] | None = None) -> AsyncIterator[Runtime]:
    options = {"api-key": "k", "base-url": fake.url, "max-retries": 0, **(llm or {})}
    config = make_config(tmp_path, llm=options, memory={"cooldown-minutes": 0})
    async with AnthropicClient(config.mate.llm) as client, open_runtime(
        config, llm=client, with_memory_worker=memory_worker,
    ) as rt:
        yield rt


async def say(rt: Runtime, text: str) -> str:
    reply = await rt.router.handle(InboundMessage("console", "me", "me", "Me", text, trigger_source="console"))
    assert reply is not None
    assert await rt.router.drain(5)  # and its memory event, recorded off the reply path
    return reply.text


async def stored(rt: Runtime) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in await rt.core.repos.messages.after(CID, 0)]


async def workspace_state(rt: Runtime, agent_id: int = 1) -> list[tuple[Any, ...]]:
    rows = await rt.core.db.fetchall(
        "SELECT filename, version, content, enabled, deleted FROM mate_workspace_file "
        "WHERE agent_id = ? ORDER BY filename", (agent_id,))
    return [tuple(r) for r in rows]


def is_memory_request(recorded: RecordedRequest) -> bool:
    return is_memory_extraction(recorded.body)


def last_tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    last = body["messages"][-1]
    assert last["role"] == "user" and isinstance(last["content"], list)
    return [b for b in last["content"] if b["type"] == "tool_result"]


# -- retried by the SDK ----------------------------------------------------------------------


@pytest.mark.parametrize(("status", "error_type"), [(429, "rate_limit_error"), (529, "overloaded_error")])
async def test_transient_error_is_retried_then_answered(
    tmp_path: Path, fake: FakeAnthropic, status: int, error_type: str,
) -> None:
    async with running(tmp_path, fake, llm={"max-retries": 2}) as rt:
        fake.reply_error(status, error_type, "try again later", retry_after=0.001)
        fake.reply_text("made it")
        reply = await say(rt, "hello there")
        rows = await stored(rt)

    assert reply == "made it"
    assert len(fake.messages_requests()) == 2 and fake.pending() == 0
    assert fake.messages_requests()[0] == fake.messages_requests()[1]  # the same request, resent
    assert rows == [("user", "hello there"), ("assistant", "made it")]


# -- apologised for ----------------------------------------------------------------------------


@pytest.mark.parametrize("failure", ["server_error", "connection_reset", "garbage_tool_input"])
async def test_failed_call_gives_an_apology_and_stores_only_the_user_message(
    tmp_path: Path, fake: FakeAnthropic, failure: str,
) -> None:
    async with running(tmp_path, fake, memory_worker=True) as rt:  # max-retries 0
        if failure == "server_error":
            fake.reply_error(500, "api_error", "Internal server error")
        elif failure == "connection_reset":
            fake.reply_disconnect()
        else:  # not JSON at all: the SDK cannot parse the body
            fake.reply_raw_tool_use(WRITE_TOOL, "{not json")
        before = await workspace_state(rt)
        reply = await say(rt, "remember that I asked")  # would pass the memory pre-checks
        rows = await stored(rt)
        after = await workspace_state(rt)
        pending = await rt.core.repos.memory_pending.all()
        apology = rt.core.prompts.text("llm_error")

    assert reply == apology
    assert len(fake.messages_requests()) == 1
    assert rows == [("user", "remember that I asked")]
    assert pending == []  # no memory event for a turn the model never answered
    assert after == before


async def test_timeout_gives_an_apology_in_time(tmp_path: Path, fake: FakeAnthropic) -> None:
    fake.latency = 1.0
    async with running(tmp_path, fake, llm={"timeout-seconds": 0.3}) as rt:
        started = time.monotonic()
        reply = await say(rt, "hello there")
        elapsed = time.monotonic() - started
        rows = await stored(rt)
        apology = rt.core.prompts.text("llm_error")

    assert reply == apology
    assert elapsed < 0.9  # gave up at the timeout, did not wait for the answer
    assert len(fake.messages_requests()) == 1
    assert rows == [("user", "hello there")]


# -- malformed tool calls ---------------------------------------------------------------------


async def test_unknown_tool_gets_an_error_result_and_the_reply_is_delivered(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    async with running(tmp_path, fake) as rt:
        fake.reply_tool_use("delete_everything", {"really": True}, tool_use_id="toolu_x1")
        fake.reply_text("I cannot do that, sorry.")
        reply = await say(rt, "please delete everything")
        rows = await stored(rt)
        unknown = rt.core.prompts.text("tool_unknown", name="delete_everything")

    assert reply == "I cannot do that, sorry."
    first, second = fake.messages_requests()
    (result,) = last_tool_results(second)
    uncached = {k: v for k, v in result.items() if k != "cache_control"}  # a breakpoint may sit on it
    assert uncached == {"type": "tool_result", "tool_use_id": "toolu_x1", "content": unknown, "is_error": True}
    assert second["messages"][-2]["content"][-1]["type"] == "tool_use"
    assert [r[0] for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[-1] == ("assistant", "I cannot do that, sorry.")


@pytest.mark.parametrize("raw", ['"a string"', "[1,2]"])
async def test_tool_input_that_is_not_an_object_gets_an_error_result(
    tmp_path: Path, fake: FakeAnthropic, raw: str,
) -> None:
    async with running(tmp_path, fake) as rt:
        before = await workspace_state(rt)
        fake.reply_raw_tool_use(WRITE_TOOL, raw, tool_use_id="toolu_bad")
        fake.reply_text("That did not work, sorry.")
        reply = await say(rt, "write something down")
        rows = await stored(rt)
        after = await workspace_state(rt)

    assert reply == "That did not work, sorry."
    _, second = fake.messages_requests()
    (result,) = last_tool_results(second)
    assert result["tool_use_id"] == "toolu_bad" and result["is_error"] is True
    # the replayed tool_use carries an object, so the follow-up request is valid for the API
    tool_use = second["messages"][-2]["content"][-1]
    assert tool_use["type"] == "tool_use" and isinstance(tool_use["input"], dict)
    assert [r[0] for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert after == before


# -- malformed memory JSON --------------------------------------------------------------------


async def test_memory_json_garbage_is_retried_then_recorded_failed_without_writes(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    def respond(recorded: RecordedRequest) -> Script:
        return TextReply("lol not json" if is_memory_request(recorded) else "sure")

    fake.responder = respond
    async with running(tmp_path, fake, memory_worker=True) as rt:
        attempts_seen: list[int] = []

        async def sleep(seconds: float) -> None:  # the worker's backoff: note the row, do not wait
            row = await rt.core.repos.memory_pending.get(CID)
            attempts_seen.append(row.attempts if row else -1)
            await asyncio.sleep(0)

        before = await workspace_state(rt)
        await say(rt, "I like green tea a lot")  # 2 messages: below the minimum, nothing queued
        assert await rt.core.repos.memory_pending.all() == []
        await say(rt, "and I live in Porto these days")
        (pending,) = await rt.core.repos.memory_pending.all()  # recorded by the router's publish
        assert pending.attempts == 0
        # The runtime's worker loop is not started; a worker with instant backoff takes the row over.
        worker = MemoryWorker(rt.memory_services.summarization, rt.core.repos, rt.core.config.mate, sleep=sleep,
                              retry=replace(PENDING_EXTRACTION, base=0.0, maximum=0.0))
        async with worker:  # recover(): the pending row is queued
            loop_task = asyncio.create_task(worker.run())
            try:
                assert await worker.drain(10)
            finally:
                loop_task.cancel()
                await asyncio.gather(loop_task, return_exceptions=True)
        after = await workspace_state(rt)
        runs = await rt.core.repos.memory_runs.for_conversation(CID)
        remaining = await rt.core.repos.memory_pending.all()
        conversation = await rt.core.repos.conversations.get(CID)

    assert len([r for r in fake.requests if is_memory_request(r)]) == 3
    assert attempts_seen == [1, 2]  # each failed attempt was counted on the durable row
    assert remaining == []  # gave up: the row is gone, the failure is on record
    assert [r.status for r in runs] == ["failed"] * 4
    assert all("invalid JSON" in (r.error or "") for r in runs[:3])
    assert runs[-1].reason == "gave up after 3 attempts" and "invalid JSON" in (runs[-1].error or "")
    assert after == before  # no workspace file written: same versions, same contents
    assert not any(name.startswith("memory/") for name, *_ in after)
    assert conversation is not None and conversation.memory_upto_message_id == 0


async def test_memory_json_garbage_in_process_retries_end_failed(tmp_path: Path, fake: FakeAnthropic) -> None:
    def respond(recorded: RecordedRequest) -> Script:
        return TextReply("```json\n{lol not json}\n```" if is_memory_request(recorded) else "sure")

    fake.responder = respond
    async with running(tmp_path, fake, memory_worker=True) as rt:
        await say(rt, "remember that my sister is called Ana")
        before = await workspace_state(rt)
        service = MemorySummarizationService(rt.core.config.mate, rt.core.repos, rt.core.workspace, rt.llm,
                                             rt.core.prompts, retry=NO_WAITS)
        outcome = await service.analyze_and_update_memory(1, CID, attempts=3)
        after = await workspace_state(rt)
        runs = await rt.core.repos.memory_runs.for_conversation(CID)

    assert outcome.status == "failed" and outcome.retryable and not outcome.updated
    assert "invalid JSON" in outcome.reason
    assert len([r for r in fake.requests if is_memory_request(r)]) == 3
    assert [(r.status, r.reason) for r in runs] == [("failed", f"attempt {n}/3") for n in (1, 2, 3)]
    assert after == before
