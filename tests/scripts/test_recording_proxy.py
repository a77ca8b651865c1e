"""scripts/recording_proxy.py over real HTTP on loopback: it passes requests and answers (SSE
included) through unchanged, and records each one: which were extractions, which repeated an
earlier one byte for byte, and the timings llama-server's answers carry."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import pytest
from aiohttp import web

PROMPTS = Path(__file__).resolve().parents[2] / "prompts"
TIMINGS = {"cache_n": 0, "prompt_n": 300, "prompt_ms": 3000.0, "predicted_n": 12, "predicted_ms": 900.0}
SSE = (
    b'data: {"choices": [{"delta": {"content": "Hel"}}]}\n\n'
    b'data: {"choices": [{"delta": {"content": "lo"}, "finish_reason": "stop"}], '
    b'"timings": ' + json.dumps(TIMINGS).encode() + b'}\n\n'
    b'data: {"choices": [], "usage": {"prompt_tokens": 300, "completion_tokens": 12}}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.fixture
def proxy_module(script: Callable[[str], ModuleType]) -> ModuleType:
    return script("recording_proxy")


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A tiny model server: Messages answers in JSON, Chat Completions as SSE; it keeps what it got."""
    seen: list[dict[str, Any]] = []

    async def messages(request: web.Request) -> web.Response:
        seen.append({"path": request.path_qs, "key": request.headers.get("x-api-key"), "body": await request.read()})
        return web.json_response({"type": "message", "content": [{"type": "text", "text": "ok"}],
                                  "usage": {"input_tokens": 10, "output_tokens": 3}}, headers={"x-upstream": "yes"})

    async def chat(request: web.Request) -> web.StreamResponse:
        seen.append({"path": request.path_qs, "key": request.headers.get("authorization"),
                     "body": await request.read()})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in SSE.split(b"\n\n")[:-1]:
            await response.write(event + b"\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


def _extraction_body() -> bytes:
    system = (PROMPTS / "en" / "memory" / "summarize-system.md.j2").read_text()
    return json.dumps({"model": "m", "max_tokens": 900, "system": [{"type": "text", "text": system}],
                       "messages": [{"role": "user", "content": "<transcript>Lena: hi</transcript>"}]}).encode()


async def test_two_identical_extraction_bodies_are_one_repeat(
    proxy_module: ModuleType, upstream: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = upstream
    body = _extraction_body()
    chat = json.dumps({"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}],
                       "tools": [{"name": "remember"}]}).encode()
    async with proxy_module.RecordingProxy(url) as proxy, aiohttp.ClientSession() as client:
        answers = []
        for sent in (body, chat, body, body.replace(b"hi", b"hello")):
            async with client.post(f"{proxy.url}/v1/messages?beta=true", data=sent,
                                   headers={"x-api-key": "k", "Content-Type": "application/json"}) as answer:
                answers.append((answer.status, answer.headers.get("x-upstream"), await answer.json()))
        records = proxy.records
        counts = proxy.summary()
    assert [s["body"] for s in seen] == [body, chat, body, body.replace(b"hi", b"hello")]
    assert {s["path"] for s in seen} == {"/v1/messages?beta=true"} and {s["key"] for s in seen} == {"k"}
    assert all(a == (200, "yes", {"type": "message", "content": [{"type": "text", "text": "ok"}],
                                  "usage": {"input_tokens": 10, "output_tokens": 3}}) for a in answers)
    assert [r.extraction for r in records] == [True, False, True, True]
    assert counts == {"model_requests": 4, "extraction_requests": 3, "extraction_prompts_repeated": 1}
    assert [r.output_tokens for r in records] == [3, 3, 3, 3] and records[0].timings is None


async def test_a_streamed_answer_comes_back_unchanged_with_its_timings_recorded(
    proxy_module: ModuleType, upstream: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = upstream
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    with proxy_module.RecordingProxy(url) as proxy:  # on a thread of its own, as the daemon lane runs it
        async with aiohttp.ClientSession() as client, client.post(
            f"{proxy.url}/v1/chat/completions", data=body, headers={"Authorization": "Bearer t"},
        ) as answer:
            assert answer.headers["Content-Type"].startswith("text/event-stream")
            streamed = await answer.read()
        (record,) = proxy.records
    assert streamed == SSE
    assert seen == [{"path": "/v1/chat/completions", "key": "Bearer t", "body": body}]
    assert record.timings == TIMINGS and record.output_tokens == 12
    assert record.raw_seconds == pytest.approx(3.9)
    assert not record.extraction and record.generation and record.status == 200


async def test_an_upstream_that_does_not_answer_is_a_502_recorded(proxy_module: ModuleType) -> None:
    async with proxy_module.RecordingProxy("http://127.0.0.1:9") as proxy, aiohttp.ClientSession() as client:
        async with client.post(f"{proxy.url}/v1/messages", data=b"{}") as answer:
            assert answer.status == 502
        (record,) = proxy.records
    assert record.status == 502 and record.error


@pytest.mark.parametrize(("locale", "name"), [
    ("en", "summarize-system"), ("zh-CN", "summarize-system"),
    ("en", "summarize-group-system"), ("zh-CN", "summarize-group-system"),
])
def test_every_extraction_prompt_is_known_by_its_first_words(proxy_module: ModuleType, locale: str, name: str) -> None:
    system = (PROMPTS / locale / "memory" / f"{name}.md.j2").read_text()
    as_system = json.dumps({"system": system, "messages": []}).encode()
    # Reusing the chat's prefix, the instructions travel in a user message (OpenAI: every message).
    as_message = json.dumps({"messages": [{"role": "system", "content": "You are Mate."},
                                          {"role": "user", "content": [{"type": "text", "text": system}]}]}).encode()
    assert proxy_module.is_extraction(as_system) and proxy_module.is_extraction(as_message)


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
def test_consolidation_and_chat_are_no_extraction(proxy_module: ModuleType, locale: str) -> None:
    emergence = (PROMPTS / locale / "memory" / "emergence-system.md.j2").read_text()
    assert not proxy_module.is_extraction(json.dumps({"system": emergence, "messages": []}).encode())
    assert not proxy_module.is_extraction(b'{"messages": [{"role": "user", "content": "remember my tea"}]}')
    assert not proxy_module.is_extraction(b"not json")
