"""Every failure gets an answer: odd model answers, storage that refuses writes, bounded waits (SPEC S20)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.fakes.anthropic import RecordedRequest
from tests.support.api_env import Api, open_api


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in open_api(tmp_path):
        yield opened


def _html(request: RecordedRequest) -> web.Response:
    return web.Response(text="<html><body><h1>502 Bad Gateway</h1>nginx</body></html>", content_type="text/html")


def _html_502(request: RecordedRequest) -> web.Response:
    return web.Response(status=502, text="<html><body><h1>502 Bad Gateway</h1></body></html>",
                        content_type="text/html")


def _not_a_message(request: RecordedRequest) -> dict[str, object]:
    return {"foo": 1}


def _truncated(request: RecordedRequest) -> web.Response:
    return web.Response(text='{"id": "msg_1", "type": "message", "content": [{"type": "te', content_type="application/json")


@pytest.mark.parametrize("answer", [_html, _html_502, _not_a_message, _truncated])
async def test_an_answer_that_is_not_the_messages_api_gets_the_apology(api: Api, answer: object) -> None:
    api.fake.reply_with(answer)  # type: ignore[arg-type]
    status, body = await api.call("POST", "/api/v1/chat/1", json={"message": "hello there"})
    stored = await api.rt.core.repos.messages.after(await _only_conversation(api), 0)
    assert (status, body["code"]) == (502, 502)
    assert body["msg"] == api.rt.core.prompts.text("llm_error")
    assert [m.role for m in stored] == ["user"]  # the message is kept for the next try
    api.fake.reply_text("back")
    status, body = await api.call("POST", "/api/v1/chat/1", json={"message": "again"})
    assert (status, body["reply"]) == (200, "back")


async def _only_conversation(api: Api) -> str:
    rows = await api.rt.core.db.fetchall("SELECT id FROM mate_conversation")
    return str(rows[0][0])


async def test_usage_with_nulls_is_still_a_reply(api: Api) -> None:
    api.fake.reply_with(lambda r: {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                                   "content": [{"type": "text", "text": "fine"}], "stop_reason": "end_turn",
                                   "stop_sequence": None, "usage": {"input_tokens": None, "output_tokens": None}})
    status, body = await api.call("POST", "/api/v1/chat/1", json={"message": "hello"})
    assert (status, body["reply"]) == (200, "fine")


@pytest.mark.parametrize("pragma", ["PRAGMA query_only = ON", "PRAGMA max_page_count = 1"])
async def test_a_database_that_refuses_writes_gets_the_apology_not_a_500(api: Api, pragma: str) -> None:
    api.fake.reply_text("first")
    assert (await api.call("POST", "/api/v1/chat/1", json={"message": "hello", "conversationId": "c"}))[0] == 200
    await api.rt.core.db.writer.execute(pragma)  # a read-only file; a full disk (no page can be added)
    api.fake.reply_text("a paid-for answer")
    status, body = await api.call("POST", "/api/v1/chat/1", json={"message": "hello there " * 20_000,
                                                                  "conversationId": "c"})
    assert (status, body["code"]) == (503, 503)
    assert body["msg"] == api.rt.core.prompts.text("storage_error")


async def test_a_lone_surrogate_in_a_tool_input_does_not_end_the_turn(api: Api) -> None:
    api.fake.reply_raw_tool_use("list_workspace_memory_files", '{"agentId": 1, "filenamePrefix": "me\\ud800"}')
    api.fake.reply_text("listed")
    status, body = await api.call("POST", "/api/v1/chat/1", json={"message": "list my files"})
    assert (status, body["reply"]) == (200, "listed")
    replay = api.fake.messages_requests()[-1]["messages"]
    assert "me\ufffd" in str(replay)


async def test_a_retry_after_longer_than_the_timeout_is_not_waited_out(tmp_path: Path) -> None:
    async for api in open_api(tmp_path, llm_retries=3):
        api.fake.reply_error(429, "rate_limit_error", "slow down", retry_after=3600)
        loop = asyncio.get_running_loop()
        started = loop.time()
        status, body = await api.call("POST", "/api/v1/chat/1", json={"message": "hello"})
        elapsed = loop.time() - started
        assert (status, body["code"]) == (502, 502)
        assert elapsed < 5
        assert len(api.fake.messages_requests()) == 1


async def test_a_short_retry_after_is_honoured(tmp_path: Path) -> None:
    async for api in open_api(tmp_path, llm_retries=2):
        api.fake.reply_error(429, "rate_limit_error", "slow down", retry_after=0.2)
        api.fake.reply_error(529, "overloaded_error", "Overloaded", retry_after=0.01)
        api.fake.reply_text("made it")
        status, body = await api.call("POST", "/api/v1/chat/1", json={"message": "hello"})
        times = [r.time for r in api.fake.requests]
        assert (status, body["reply"]) == (200, "made it")
        assert times[1] - times[0] >= 0.2
