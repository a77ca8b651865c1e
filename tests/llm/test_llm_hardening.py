"""What an outside attack on the model clients found (SPEC S33): answers that are not text,
lone surrogates in a stream, bodies that never end, and one bad stream turning streaming off."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.app.api.server import ApiServer
from bot.core.config import LlmConfig, parse_config
from bot.core.errors import LLMError
from bot.llm import AnthropicClient, LLMRequest, OpenAIClient
from bot.app.runtime import Runtime, open_runtime
from tests.support.config import make_config
from tests.support.fakes.anthropic import CustomReply, FakeAnthropic, RecordedRequest
from tests.support.fakes.anthropic_stall import DribbleReply
from tests.support.fakes.openai_chat import FakeOpenAIChat

Fake = FakeAnthropic | FakeOpenAIChat
Client = AnthropicClient | OpenAIClient


@pytest.fixture(params=["anthropic", "openai"])
async def fake(request: pytest.FixtureRequest) -> AsyncIterator[Fake]:
    server: Fake = FakeAnthropic() if request.param == "anthropic" else FakeOpenAIChat()
    async with server:
        yield server


def protocol(fake: Fake) -> str:
    return "anthropic" if isinstance(fake, FakeAnthropic) else "openai"


def llm_options(fake: Fake, **options: Any) -> dict[str, Any]:
    base_url = fake.url if isinstance(fake, FakeAnthropic) else fake.base_url
    return {"api": protocol(fake), "api-key": "sk-hardening", "base-url": base_url, "max-retries": 0,
            "text-tool-calls": "off", **options}


def llm_config(fake: Fake, **options: Any) -> LlmConfig:
    return parse_config({"mate": {"llm": llm_options(fake, **options)}}, environ={}).mate.llm


def client(fake: Fake, clock: Any = time.monotonic, **options: Any) -> Client:
    config = llm_config(fake, **options)
    return AnthropicClient(config, clock=clock) if isinstance(fake, FakeAnthropic) else OpenAIClient(config, clock=clock)


def ask(text: str = "hi") -> LLMRequest:
    return LLMRequest(model="m", system="You are Mate.", messages=[{"role": "user", "content": text}], max_tokens=200)


def streamed_flags(fake: Fake) -> list[bool]:
    return [bool(body.get("stream")) for body in fake.messages_requests()]


# -- the wire: answers as a server could send them -----------------------------------------


def whole_answer(fake: Fake, content: Any) -> dict[str, Any]:
    """A non-streamed answer whose text (Anthropic: the text block's `text`; OpenAI:
    `choices[0].message.content`) is `content`, whatever it is."""
    if isinstance(fake, FakeAnthropic):
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
                "content": [{"type": "text", "text": content}], "usage": {"input_tokens": 5, "output_tokens": 2}}
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}


def stream_body(fake: Fake, pieces: list[Any]) -> bytes:
    """A whole event stream whose text deltas are `pieces` (Anthropic: the text block starts
    with the first piece)."""
    if isinstance(fake, FakeAnthropic):
        start = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
                 "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"message": start}),
            ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": pieces[0]}})]
        events += [("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p}})
                   for p in pieces[1:]]
        events += [("content_block_stop", {"index": 0}),
                   ("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                      "usage": {"output_tokens": 2}}),
                   ("message_stop", {})]
        return "".join(f"event: {n}\ndata: {json.dumps({'type': n, **d})}\n\n" for n, d in events).encode()

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        data = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(data)}\n\n"

    text = chunk({"role": "assistant", "content": ""}) + "".join(chunk({"content": p}) for p in pieces)
    return (text + chunk({}, "stop") + "data: [DONE]\n\n").encode()


def send(body: bytes, content_type: str, status: int = 200) -> CustomReply:
    async def handler(_: RecordedRequest) -> web.StreamResponse:
        return web.Response(status=status, body=body, content_type=content_type)

    return CustomReply(handler)


# -- through the daemon's web API ----------------------------------------------------------


@dataclass
class Web:
    url: str
    rt: Runtime
    http: aiohttp.ClientSession


@asynccontextmanager
async def web_api(tmp_path: Path, fake: Fake) -> AsyncIterator[Web]:
    config = make_config(tmp_path, llm=llm_options(fake), api={"port": 0})
    # Bounded: a stream the route never ends must fail the test, not hang it.
    async with open_runtime(config) as rt, ApiServer(rt, config.mate.api) as server, \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        yield Web(f"http://127.0.0.1:{server.port}/api/v1/chat/1", rt, http)


def events_of(text: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


def problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


NOT_TEXT = [42, {}, {"text": "hi"}, [1], None]


@pytest.mark.parametrize("content", NOT_TEXT, ids=["number", "empty-object", "object", "list", "null"])
async def test_an_answer_whose_content_is_not_text_is_a_malformed_answer(fake: Fake, content: Any) -> None:
    fake.reply_with(lambda _: whole_answer(fake, content))
    async with client(fake) as llm:
        with pytest.raises(LLMError, match="malformed response"):
            await llm.complete(ask())
    assert len(fake.messages_requests()) == 1


@pytest.mark.parametrize("content", [42, {"text": "hi"}, None], ids=["number", "object", "null"])
async def test_the_web_chat_answers_content_that_is_not_text_with_the_apology_not_a_500(
    tmp_path: Path, fake: Fake, content: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    async with web_api(tmp_path, fake) as api:
        fake.reply_with(lambda _: whole_answer(fake, content))
        async with api.http.post(api.url, json={"message": "hello"}) as response:
            status, body = response.status, await response.json()
        apology = api.rt.core.prompts.text("llm_error")

    assert (status, body["msg"]) == (502, apology)
    assert problems(caplog) == []


async def test_an_openai_refusal_without_content_is_the_answer(fake: Fake) -> None:
    if isinstance(fake, FakeAnthropic):
        pytest.skip("Chat Completions only")
    answer = whole_answer(fake, None)
    answer["choices"][0]["message"]["refusal"] = "I can't help with that."
    fake.reply_with(lambda _: answer)
    async with client(fake) as llm:
        response = await llm.complete(ask())
    assert response.text == "I can't help with that."


# The SDK's own pydantic models warn when they copy a text block whose text is a number.
@pytest.mark.filterwarnings("ignore::UserWarning")
async def test_a_streamed_text_that_is_not_text_gets_the_apology_and_done(
    tmp_path: Path, fake: Fake, caplog: pytest.LogCaptureFixture,
) -> None:
    async with web_api(tmp_path, fake) as api:
        fake.push(send(stream_body(fake, [42, 42]), "text/event-stream"))
        async with api.http.post(f"{api.url}/stream", json={"message": "hello"}) as response:
            events = events_of(await response.text())
        apology = api.rt.core.prompts.text("llm_error")

    assert events[-1][0] == "done" and events[-1][1]["failure"] == "llm"
    assert events[-1][1]["reply"] == apology
    assert [e for e, _ in events].count("delta") == 0
    assert problems(caplog) == []


async def test_a_lone_surrogate_in_a_streamed_delta_is_replaced_and_the_stream_ends_with_done(
    tmp_path: Path, fake: Fake, caplog: pytest.LogCaptureFixture,
) -> None:
    async with web_api(tmp_path, fake) as api:
        fake.push(send(stream_body(fake, ["", "a\ud800b", " and \udc00 more"]), "text/event-stream"))
        async with api.http.post(f"{api.url}/stream", json={"message": "hello"}) as response:
            events = events_of(await response.text())
        stored = [m.content for m in await api.rt.core.repos.messages.after(events[-1][1]["conversationId"], 0)]

    shown = "".join(data["text"] for event, data in events if event == "delta")
    assert shown == "a\ufffdb and \ufffd more"
    assert events[-1] == ("done", {"reply": "a\ufffdb and \ufffd more", "conversationId": events[-1][1]["conversationId"]})
    assert stored == ["hello", "a\ufffdb and \ufffd more"]
    assert problems(caplog) == []


# -- timeout-seconds bounds the whole answer ---------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_body_that_never_ends_is_cut_at_timeout_seconds_and_retried(fake: Fake, streamed: bool) -> None:
    # One byte every 0.1 s: httpx's read timeout (restarted by each byte) never fires.
    kind = "text/event-stream" if streamed else "application/json"
    fake.push(DribbleReply(content_type=kind, body=b": keep-alive\n\n" if streamed else b'{"id": "x",      '))
    fake.push(DribbleReply(content_type=kind))
    async with client(fake, **{"timeout-seconds": 1, "max-retries": 1}) as llm:
        began = time.monotonic()
        with pytest.raises(LLMError, match="in time|went silent"):
            async with asyncio.timeout(60):  # today's bug would hold it for ever: fail instead
                await llm.complete(ask(), (lambda _: None) if streamed else None)
        took = time.monotonic() - began

    assert streamed_flags(fake) == [streamed, streamed]  # the timeout was retried, as a timeout is
    assert took < 30


# -- one bad stream does not turn streaming off ------------------------------------------------

NOT_A_STREAM = {
    "html": send(b"<html><body><h1>Welcome to the proxy</h1></body></html>", "text/html"),
    "plain-text": send(b"hello from a plain server", "text/plain"),
    "empty": send(b"", "application/json"),
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refuse_streams(fake: Fake, bad: CustomReply) -> None:
    """Streaming requests get `bad`, others a plain answer."""
    fake.responder = lambda recorded: bad if recorded.body.get("stream") else None


async def streamed_answer(llm: Client) -> str:
    heard: list[str] = []
    response = await llm.complete(ask(), heard.append)
    return response.text


@pytest.mark.parametrize("answer", list(NOT_A_STREAM), ids=list(NOT_A_STREAM))
async def test_one_answer_that_is_not_a_stream_falls_back_for_that_request_only(
    fake: Fake, answer: str, caplog: pytest.LogCaptureFixture,
) -> None:
    fake.default_text = "plain answer"
    caplog.set_level(logging.INFO, logger="bot.llm")
    async with client(fake) as llm:
        refuse_streams(fake, NOT_A_STREAM[answer])
        first = await streamed_answer(llm)
        fake.responder = None
        second = await streamed_answer(llm)

    assert (first, second) == ("plain answer", "plain answer")
    assert streamed_flags(fake) == [True, False, True]  # the next request streams again
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_three_bad_streams_in_a_row_turn_streaming_off_for_ten_minutes(
    fake: Fake, caplog: pytest.LogCaptureFixture,
) -> None:
    fake.default_text = "plain answer"
    clock = Clock()
    caplog.set_level(logging.WARNING, logger="bot.llm")
    async with client(fake, clock) as llm:
        refuse_streams(fake, NOT_A_STREAM["html"])
        for _ in range(3):
            assert await streamed_answer(llm) == "plain answer"
        assert streamed_flags(fake) == [True, False] * 3
        off = [r.getMessage() for r in caplog.records]
        clock.now += 599
        await streamed_answer(llm)
        assert streamed_flags(fake)[6:] == [False]  # still off
        fake.responder = None  # the server streams again
        clock.now += 2
        assert await streamed_answer(llm) == "plain answer"
        assert streamed_flags(fake)[7:] == [True]  # tried again after 10 minutes, and it streams
        back = [r.getMessage() for r in caplog.records][len(off):]

    assert len(off) == 1 and "does not stream" in off[0]
    assert len(back) == 1 and "again" in back[0]


async def test_a_streamed_answer_clears_the_count_of_bad_ones(fake: Fake) -> None:
    fake.default_text = "plain answer"
    clock = Clock()
    async with client(fake, clock) as llm:
        for bad_in_a_row in (2, 2):
            refuse_streams(fake, NOT_A_STREAM["plain-text"])
            for _ in range(bad_in_a_row):
                await streamed_answer(llm)
            fake.responder = None
            await streamed_answer(llm)  # streamed: the count starts again

    assert streamed_flags(fake) == [True, False, True, False, True] * 2
