"""Streams that go wrong the way real servers make them go wrong (SPEC S20, S21)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from channels.base import InboundMessage
from tests.support.fakes.anthropic import ErrorReply, FakeAnthropic, RecordedRequest, TextReply
from tests.support.recording import Recorder
from tests.support.runtime import running
from tests.support.recording import ask

LONG = "My garden has " + ", ".join(f"plant number {i}" for i in range(400)) + "."


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


def llm(fake: FakeAnthropic, retries: int = 0) -> dict[str, Any]:
    return {"llm": {"api-key": "k", "base-url": fake.url, "max-retries": retries}}


def plain_message(text: str) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": text}], "usage": {"input_tokens": 5, "output_tokens": 2}}


async def test_a_server_that_ignores_stream_true_is_asked_without_streaming(
    tmp_path: Path, fake: FakeAnthropic, caplog: pytest.LogCaptureFixture,
) -> None:
    # A proxy that answers every request with a plain JSON body, streaming or not.
    fake.responder = lambda request: _json_always(request)
    caplog.set_level(logging.WARNING, logger="bot.llm")
    async with running(tmp_path, fake, **llm(fake)) as rt:
        replies = [await ask(rt, text) for text in ("hello", "again", "and again", "once more")]

    assert [(r.failure, r.text) for r in replies] == [("", "plain answer")] * 4
    streamed = [bool(r.body.get("stream")) for r in fake.requests if r.path == "/v1/messages"]
    # Each request falls back on its own; after three in a row streaming is off (for 10 minutes).
    assert streamed == [True, False] * 3 + [False]
    assert sum("does not stream" in r.getMessage() for r in caplog.records) == 1


def _json_always(request: RecordedRequest) -> Any:
    from tests.support.fakes.anthropic import CustomReply

    return CustomReply(lambda _: plain_message("plain answer"))


async def test_an_empty_200_gets_the_apology(tmp_path: Path, fake: FakeAnthropic) -> None:
    from tests.support.fakes.anthropic import CustomReply

    async def empty(_: RecordedRequest) -> web.StreamResponse:
        return web.Response(status=200, body=b"", content_type="application/json")

    fake.responder = lambda _: CustomReply(empty)
    async with running(tmp_path, fake, **llm(fake)) as rt:
        reply = await ask(rt, "hello")

    assert reply.failure == "llm" and reply.text


async def test_an_overloaded_event_inside_the_stream_is_retried(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, **llm(fake, retries=1)) as rt:
        fake.push(ErrorReply(529, "overloaded_error", "Overloaded", in_stream=True))
        fake.reply_text("after the retry")
        reply = await ask(rt, "hello")
        rows = await rt.core.repos.llm_usage.totals_since("1970")

    assert not reply.failure and reply.text == "after the retry"
    assert len(fake.messages_requests()) == 2
    # the retried answer is the one recorded
    assert [(r.purpose, r.calls) for r in rows] == [("chat", 1)]


async def test_a_broken_stream_still_records_what_it_was_billed(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, **llm(fake)) as rt:
        fake.push(TextReply("A first part, and then the connection goes away for good.", break_after_chars=8))
        reply = await ask(rt, LONG)
        rows = await rt.core.repos.llm_usage.totals_since("1970")

    assert reply.failure == "llm"
    assert len(rows) == 1 and rows[0].purpose == "chat" and rows[0].calls == 1
    assert rows[0].prompt_tokens > 1024  # the prompt the message_start reported


async def test_calibration_counts_the_cached_prompt_too(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, **llm(fake)) as rt:
        for text in (LONG, "what grows there?", "and the tomatoes?", "thanks", "bye"):
            fake.reply_text("ok")
            await ask(rt, text)
        factor = rt.tokens.factor(rt.agent.model)
        usage = await rt.core.repos.llm_usage.totals_since("1970")

    assert usage[0].cache_read_input_tokens > usage[0].input_tokens  # the cache did hit
    # the fake counts tokens close to our estimator: a factor that only saw the uncached
    # part would have fallen far below 1
    assert 0.8 < factor < 1.25


async def test_an_answer_that_never_ends_is_cut_at_the_deadline(
    tmp_path: Path, fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    import bot.llm.failures

    monkeypatch.setattr(bot.llm.failures, "STREAM_DEADLINE_S", 0.6)
    fake.tokens_per_s = 5.0  # every piece arrives well inside the read timeout
    options = {"llm": {"api-key": "k", "base-url": fake.url, "max-retries": 0, "timeout-seconds": 0.5}}
    async with running(tmp_path, fake, **options) as rt:
        fake.reply_text(" ".join(f"word{i}" for i in range(200)))
        began = time.monotonic()
        reply = await ask(rt, "hello")
        took = time.monotonic() - began

    assert reply.failure == "llm" and "broke off" in reply.text
    assert took < 3


def test_a_blank_system_prompt_is_left_out() -> None:
    from bot.llm import LLMRequest
    from bot.llm.anthropic_messages import request_params

    body = request_params(LLMRequest(model="m", system="  \n", messages=[{"role": "user", "content": "hi"}],
                                     max_tokens=10, cache_messages=(-1,)))
    assert "system" not in body
    assert body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}


# -- servers that cannot do everything (local models, proxies) -----------------------------------


def _has_cache_control(body: dict[str, Any]) -> bool:
    import json

    return '"cache_control"' in json.dumps(body)


async def test_a_server_that_refuses_cache_control_is_asked_without_it(
    tmp_path: Path, fake: FakeAnthropic, caplog: pytest.LogCaptureFixture,
) -> None:
    refusal = ErrorReply(422, "invalid_request_error", "system.0.cache_control: Extra inputs are not permitted")
    fake.responder = lambda request: refusal if _has_cache_control(request.body) else TextReply("fine")
    caplog.set_level(logging.WARNING, logger="bot.llm")
    async with running(tmp_path, fake, **llm(fake)) as rt:
        first = await ask(rt, "hello")
        second = await ask(rt, "again")

    assert (first.text, second.text) == ("fine", "fine") and not first.failure
    marked = [_has_cache_control(r.body) for r in fake.requests if r.path == "/v1/messages"]
    assert marked == [True, False, False]
    assert sum("prompt caching" in r.getMessage() for r in caplog.records) == 1


async def test_a_server_that_refuses_streaming_is_asked_without_it(tmp_path: Path, fake: FakeAnthropic) -> None:
    refusal = ErrorReply(400, "invalid_request_error", "Streaming is not supported by this server")
    fake.responder = lambda request: refusal if request.body.get("stream") else TextReply("fine")
    async with running(tmp_path, fake, **llm(fake)) as rt:
        reply = await ask(rt, "hello")
        fake.responder = lambda request: ErrorReply(400, "invalid_request_error", "upstream said no")
        refused = await ask(rt, "again")

    assert reply.text == "fine"
    # The refusal turned streaming off for that request only.
    assert [bool(r.body.get("stream")) for r in fake.requests if r.path == "/v1/messages"] == [True, False, True]
    assert refused.failure == "llm"  # an error that names no feature is an error


async def test_a_cache_control_error_when_caching_is_off_is_an_error(tmp_path: Path, fake: FakeAnthropic) -> None:
    refusal = ErrorReply(400, "invalid_request_error", "cache_control is not allowed here")
    fake.responder = lambda request: refusal
    async with running(tmp_path, fake, **llm(fake)) as rt:
        reply = await ask(rt, 'my text mentions "cache_control": 1')

    assert reply.failure == "llm"
    assert len(fake.messages_requests()) == 2  # once with caching, once without, then the apology


def _event_stream(*events: tuple[str, dict[str, Any]]) -> Any:
    import json

    from tests.support.fakes.anthropic import CustomReply

    async def handler(recorded: RecordedRequest) -> web.StreamResponse:
        body = "".join(f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n" for name, data in events)
        return web.Response(body=body.encode(), content_type="text/event-stream")

    return CustomReply(handler)


START = ("message_start", {"message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                                       "content": [], "stop_reason": None, "stop_sequence": None,
                                       "usage": {"input_tokens": 3, "output_tokens": 1}}})


async def test_a_stream_of_only_pings_is_retried_and_streaming_stays_on(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, **llm(fake, retries=1)) as rt:
        fake.push(_event_stream(("ping", {})))
        fake.reply_text("after the retry")
        reply = await ask(rt, "hello")

    assert reply.text == "after the retry"
    assert [bool(r.body.get("stream")) for r in fake.requests if r.path == "/v1/messages"] == [True, True]


async def test_a_malformed_stream_gets_the_apology(tmp_path: Path, fake: FakeAnthropic) -> None:
    bad_delta = ("content_block_delta", {"index": 7, "delta": {"type": "text_delta", "text": "x"}})
    async with running(tmp_path, fake, **llm(fake)) as rt:
        fake.push(_event_stream(START, bad_delta))
        reply = await ask(rt, "hello")

    assert reply.failure == "llm" and reply.text


async def test_requests_refused_at_once_for_cache_control_both_get_answers(tmp_path: Path, fake: FakeAnthropic) -> None:
    import asyncio

    refusal = ErrorReply(400, "invalid_request_error", "cache_control: Extra inputs are not permitted", delay=0.2)
    fake.responder = lambda request: refusal if _has_cache_control(request.body) else TextReply("fine")
    async with running(tmp_path, fake, **llm(fake)) as rt:
        replies = await asyncio.gather(*(
            rt.router.handle(InboundMessage("console", who, who, who, "hello"), stream=Recorder())
            for who in ("ann", "bob")))

    assert [r.text for r in replies if r is not None] == ["fine", "fine"]
