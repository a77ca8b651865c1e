"""Odd numbers, charsets and early hang-ups never reach a 500 or a traceback, real HTTP (SPEC S30)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.storage.search import SearchHit, SqliteSearchRepository
from memory.recall import MAX_QUERY_CHARS, MemorySearchService
from tests.test_api import Api, _open

HUGE = "9" * 5000  # beyond Python's int-string conversion limit (4300 digits)
INT64_PAST = str(2**63)  # one past SQLite's largest INTEGER
UINT64_PAST = str(2**64 + 1)

# Every route of the API that takes a number or a body, with each hostile number in each place.
_NUMBER_CASES: list[tuple[str, str, dict[str, Any]]] = []
for number in (HUGE, INT64_PAST, UINT64_PAST, "-1", "0x10", "1e3"):
    _NUMBER_CASES += [
        ("POST", f"/api/v1/memory/{number}/emergence", {}),
        ("POST", f"/api/v1/memory/{number}/summarize/web:x", {}),
        ("POST", f"/api/v1/memory/1/summarize/{number}", {}),
        ("GET", f"/api/v1/memory/{number}/files", {}),
        ("GET", f"/api/v1/memory/{number}/files/MEMORY.md", {}),
        ("PUT", f"/api/v1/memory/{number}/files/NOTES.md", {"json": {"content": "x", "version": 0}}),
        ("GET", f"/api/v1/chat/{number}/conversations", {}),
        ("GET", f"/api/v1/chat/{number}/conversations/web:x/messages", {}),
        ("GET", f"/api/v1/chat/1/conversations/{number}/messages", {}),
        ("GET", f"/api/v1/chat/1/conversations/web:known/messages?after={number}", {}),
        ("GET", f"/api/v1/memory/{number}/search?q=key", {}),
        ("GET", f"/api/v1/memory/1/search?q=key&limit={number}", {}),
        ("POST", f"/api/v1/chat/{number}", {"json": {"message": "hi"}}),
        ("POST", f"/api/v1/chat/{number}/stream", {"json": {"message": "hi"}}),
    ]
# A conversationId is text: digits are a fine name, 5 000 of them are too long a name.
_NUMBER_CASES += [("POST", path, {"json": {"message": "hi", "conversationId": HUGE}})
                  for path in ("/api/v1/chat/1", "/api/v1/chat/1/stream")]
# Numbers inside JSON bodies: a version past int64, and 5000 digits anywhere in the body.
for number in (HUGE, INT64_PAST, UINT64_PAST):
    raw = f'{{"content": "x", "version": {number}}}'.encode()
    _NUMBER_CASES.append(("PUT", "/api/v1/memory/1/files/NOTES.md",
                          {"data": raw, "headers": {"Content-Type": "application/json"}}))
for path in ("/api/v1/chat/1", "/api/v1/chat/1/stream"):
    _NUMBER_CASES.append(("POST", path, {"data": f'{{"message": "hi", "n": {HUGE}}}'.encode(),
                                         "headers": {"Content-Type": "application/json"}}))

_BODY_ROUTES = [("POST", "/api/v1/chat/1"), ("POST", "/api/v1/chat/1/stream"),
                ("PUT", "/api/v1/memory/1/files/NOTES.md")]


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in _open(tmp_path):
        await opened.rt.core.repos.conversations.create("web:known", agent_id=1, channel="web",
                                                        chat_key="known", trigger_source="web")
        yield opened


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.exc_info or "Traceback" in record.getMessage() or record.levelno >= logging.ERROR]


async def _raw(api: Api, method: str, path: str, **kwargs: Any) -> tuple[int, str, str]:
    headers = {**api.auth(), **kwargs.pop("headers", {})}
    async with api.http.request(method, api.url + path, headers=headers, **kwargs) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.text()


@pytest.mark.parametrize(("method", "path", "kwargs"), _NUMBER_CASES,
                         ids=[f"{m} {p[:60]} {str(k)[:40]}" for m, p, k in _NUMBER_CASES])
async def test_odd_numbers_are_answered_as_client_errors(api: Api, caplog: pytest.LogCaptureFixture,
                                                        method: str, path: str, kwargs: dict[str, Any]) -> None:
    caplog.set_level(logging.INFO)
    status, content_type, text = await _raw(api, method, path, **kwargs)

    assert status in (400, 404), (status, text[:300])
    assert content_type.startswith("application/json") and '"msg"' in text
    assert _tracebacks(caplog) == []
    assert api.fake.messages_requests() == []


@pytest.mark.parametrize("charset", ["x-unknown", "utf-9", "rot13", "hex"])
@pytest.mark.parametrize(("method", "path"), _BODY_ROUTES)
async def test_an_unknown_charset_is_400(api: Api, caplog: pytest.LogCaptureFixture, method: str, path: str,
                                         charset: str) -> None:
    caplog.set_level(logging.INFO)
    body = b'{"message": "hi", "content": "x", "version": 0}'
    status, _, text = await _raw(api, method, path, data=body,
                                 headers={"Content-Type": f"application/json; charset={charset}"})

    assert status == 400, (status, text[:300])
    assert "charset" in text
    assert _tracebacks(caplog) == []
    assert api.fake.messages_requests() == []
    assert await api.rt.core.workspace.get(1, "NOTES.md") is None


async def test_a_known_charset_other_than_utf8_is_read(api: Api) -> None:
    status, _, text = await _raw(api, "PUT", "/api/v1/memory/1/files/NOTES.md",
                                 data='{"content": "café", "version": 0}'.encode("latin-1"),
                                 headers={"Content-Type": "application/json; charset=latin-1"})
    assert status == 200, text
    assert (await api.rt.core.workspace.get(1, "NOTES.md")).content == "café"  # type: ignore[union-attr]


async def test_messages_page_on_from_the_largest_id(api: Api) -> None:
    status, _, text = await _raw(api, "GET", f"/api/v1/chat/1/conversations/web:known/messages?after={2**63 - 1}")
    assert status == 200, text


class CountingSearchRepository(SqliteSearchRepository):
    """The real search SQL, counting each search it runs."""

    runs = 0

    async def words(self, agent_id: int, body_expression: str, source: str, limit: int) -> list[SearchHit]:
        self.runs += 1
        return await super().words(agent_id, body_expression, source, limit)

    async def substring(self, agent_id: int, text: str, source: str, limit: int) -> list[SearchHit]:
        self.runs += 1
        return await super().substring(agent_id, text, source, limit)


@pytest.fixture
def counted(api: Api) -> CountingSearchRepository:
    repository = CountingSearchRepository(api.rt.core.db)
    api.rt.extras["search"] = MemorySearchService(repository)
    return repository


@pytest.mark.parametrize("q", ["%00", "a%00b", "abc%00", "key%01", "%07bell", "del%7F", "c1%C2%85x"])
async def test_a_control_character_in_a_search_is_400(api: Api, counted: CountingSearchRepository,
                                                      caplog: pytest.LogCaptureFixture, q: str) -> None:
    await api.rt.core.workspace.write(1, "NOTES.md", "abc and a b")
    status, body = await api.call("GET", f"/api/v1/memory/1/search?q={q}")

    assert (status, body["code"]) == (400, 400)
    assert "control character (U+00" in body["msg"]
    assert counted.runs == 0 and _tracebacks(caplog) == []


@pytest.mark.parametrize("length", [MAX_QUERY_CHARS + 1, 10_000])
@pytest.mark.parametrize("letter", ["x", "%E6%B0%B4"])  # ASCII, and 水 percent-encoded: 9 bytes a character
async def test_an_over_long_search_is_400_before_any_search(api: Api, counted: CountingSearchRepository,
                                                            caplog: pytest.LogCaptureFixture, length: int,
                                                            letter: str) -> None:
    status, body = await api.call("GET", "/api/v1/memory/1/search?q=" + letter * length)

    assert (status, body["code"]) == (400, 400)
    assert f"{length} characters long" in body["msg"] and f"at most {MAX_QUERY_CHARS}" in body["msg"]
    assert counted.runs == 0 and _tracebacks(caplog) == []


async def test_the_longest_search_and_tabs_are_searched(api: Api, counted: CountingSearchRepository) -> None:
    await api.rt.core.workspace.write(1, "NOTES.md", "- the spare key is under the blue pot")
    long_query = ("spare key " * MAX_QUERY_CHARS)[:MAX_QUERY_CHARS]
    for q in (long_query, "spare%09key%0Apot"):
        status, body = await api.call("GET", "/api/v1/memory/1/search?q=" + q)
        assert status == 200 and body["data"]["results"][0]["filename"] == "NOTES.md"
    assert counted.runs >= 2


async def test_a_request_line_past_any_reason_is_one_line_not_a_traceback(
        api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    status, _, _ = await _raw(api, "GET", "/api/v1/memory/1/search?q=" + "x" * 200_000)
    assert status == 400
    assert _tracebacks(caplog) == []
    assert any("malformed HTTP" in r.getMessage() for r in caplog.records)


async def _hang_up(api: Api, path: str, body: bytes, *, sent: int | None = None) -> None:
    """Send a request (only `sent` bytes of its body, if given), then reset the connection
    without reading a byte of the answer, as a closed browser tab does."""
    host, port = api.url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    writer.write(head + body[:sent])
    await writer.drain()
    writer.transport.abort()


async def _wait_for(condition: Any, what: str, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("sent", [None, 10], ids=["whole request", "half a body"])
async def test_a_client_that_leaves_before_the_stream_starts_costs_one_line(
        api: Api, caplog: pytest.LogCaptureFixture, sent: int | None) -> None:
    caplog.set_level(logging.DEBUG)
    api.fake.reply_text("You left before I could answer.")
    body = b'{"message": "hello, then gone"}'

    await _hang_up(api, "/api/v1/chat/1/stream", body, sent=sent)

    def left() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "bot.api" and "left" in r.getMessage()]

    async def settled() -> bool:
        if left() or _tracebacks(caplog):
            return True
        # Where the server saw the reset only once the stream had begun, the reply is
        # made and stored as for any stream whose page went away.
        row = await api.rt.core.db.fetchone("SELECT COUNT(*) FROM mate_message WHERE role = 'assistant'")
        return bool(row and row[0])

    await _wait_for(settled, "the request to be settled")
    assert _tracebacks(caplog) == []
    assert len(left()) <= 1
    if left():  # it left before the stream began: nothing was asked of the model
        assert left() == ["API client left before its answer: POST /api/v1/chat/1/stream"]
        assert api.fake.messages_requests() == []
