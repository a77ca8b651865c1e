"""Odd numbers, charsets and early hang-ups never reach a 500 or a traceback, real HTTP (SPEC S30)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from bot.app.api.server import build_app
from bot.storage.search import SqliteSearchReads, SqliteSearchRepository
from memory.recall.search import MAX_QUERY_CHARS, MemorySearchService
from tests.support.api_env import Api, open_api

T = TypeVar("T")

HUGE = "9" * 5000  # beyond Python's int-string conversion limit (4300 digits)
INT64_PAST = str(2**63)  # one past SQLite's largest INTEGER
UINT64_PAST = str(2**64 + 1)
NUMBERS = (HUGE, INT64_PAST, UINT64_PAST, "-1", "0x10", "1e3", "١٢")  # the last: Arabic-Indic digits

# Every route of the API (a test below keeps this table complete): what each variable holds
# when it is not the one under attack, the query parameters that are numbers, and the body.
ROUTES: dict[tuple[str, str], tuple[tuple[str, ...], dict[str, Any] | None]] = {
    ("POST", "/api/v1/memory/{agent_id}/emergence"): ((), None),
    ("POST", "/api/v1/memory/{agent_id}/summarize/{conversation_id}"): ((), None),
    ("GET", "/api/v1/memory/{agent_id}/files"): ((), None),
    ("GET", "/api/v1/memory/{agent_id}/files/{filename}"): ((), None),
    ("PUT", "/api/v1/memory/{agent_id}/files/{filename}"): ((), {"content": "x", "version": 0}),
    ("GET", "/api/v1/memory/{agent_id}/files/{filename}/history"): ((), None),
    ("GET", "/api/v1/memory/{agent_id}/proposal"): ((), None),
    ("POST", "/api/v1/memory/{agent_id}/proposal/{answer}"): ((), None),
    ("GET", "/api/v1/chat/{agent_id}/conversations"): ((), None),
    ("GET", "/api/v1/chat/{agent_id}/conversations/{conversation_id}/messages"): (("after",), None),
    ("GET", "/api/v1/memory/{agent_id}/search"): (("limit",), None),
    ("POST", "/api/v1/chat/{agent_id}"): ((), {"message": "hi"}),
    ("POST", "/api/v1/chat/{agent_id}/stream"): ((), {"message": "hi"}),
    ("GET", "/api/v1/agents/{agent_id}/tasks"): ((), None),
    ("DELETE", "/api/v1/agents/{agent_id}/tasks/{task_id}"): ((), None),
}
_OPEN_ROUTES = {("GET", "/healthz"), ("GET", "/"), ("GET", "/api/v1/people"),  # no variables, no body
                ("GET", "/api/v1/agents")}
_DEFAULTS = {"agent_id": "1", "conversation_id": "web:known", "filename": "NOTES.md", "task_id": "1",
             "answer": "reject"}
_BASE_QUERY = {"/api/v1/memory/{agent_id}/search": "q=key"}


def _requests(method: str, template: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, request options) with each odd number in each variable, number parameter and body."""
    numbers, body = ROUTES[(method, template)]
    base_query = _BASE_QUERY.get(template, "")
    plain = {"json": body} if body is not None else {}
    found: list[tuple[str, dict[str, Any]]] = []
    for number in NUMBERS:
        for variable in [v for v in _DEFAULTS if "{" + v + "}" in template]:
            values = {**_DEFAULTS, variable: number}
            if variable != "agent_id" and number != HUGE:
                continue  # a conversation id or file name is text: only its length is odd
            found.append((template.format(**values) + ("?" + base_query if base_query else ""), plain))
        for name in numbers:
            query = "&".join(q for q in (base_query, f"{name}={number}") if q)
            found.append((template.format(**_DEFAULTS) + "?" + query, plain))
    if body is not None:
        path = template.format(**_DEFAULTS)
        for number in (HUGE, INT64_PAST, UINT64_PAST, "-" + INT64_PAST + "1"):
            for key in ("version", "extra"):  # a number the route reads, and one it does not
                raw = json.dumps({**body, key: 0}).replace(": 0}", f": {number}}}")
                found.append((path, {"data": raw.encode(), "headers": {"Content-Type": "application/json"}}))
        if "conversationId" not in body and template.startswith("/api/v1/chat"):
            found.append((path, {"json": {**body, "conversationId": HUGE}}))
    return found


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in open_api(tmp_path):
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


def test_the_table_names_every_route(api: Api) -> None:
    app = build_app(api.rt, api.rt.core.config.mate.api)
    served = {(route.method, route.resource.canonical) for route in app.router.routes()
              if route.resource is not None and route.method != "HEAD"}
    assert served == set(ROUTES) | _OPEN_ROUTES


@pytest.mark.parametrize(("method", "template"), list(ROUTES), ids=[f"{m} {t}" for m, t in ROUTES])
async def test_odd_numbers_are_answered_as_client_errors(api: Api, caplog: pytest.LogCaptureFixture,
                                                        method: str, template: str) -> None:
    caplog.set_level(logging.INFO)
    for path, options in _requests(method, template):
        status, content_type, text = await _raw(api, method, path, **options)

        assert status in (400, 404), (path[:120], str(options)[:120], status, text[:300])
        assert content_type.startswith("application/json") and '"msg"' in text
    assert _tracebacks(caplog) == []
    assert api.fake.messages_requests() == []
    assert await api.rt.core.workspace.get(1, "NOTES.md") is None


@pytest.mark.parametrize(("method", "template"), [r for r, (_, body) in ROUTES.items() if body is not None])
async def test_an_unknown_charset_is_400(api: Api, caplog: pytest.LogCaptureFixture, method: str,
                                         template: str) -> None:
    caplog.set_level(logging.INFO)
    body = b'{"message": "hi", "content": "x", "version": 0}'
    for charset in ("x-unknown", "utf-9", "rot13", "hex", "punycode"):
        status, _, text = await _raw(api, method, template.format(**_DEFAULTS), data=body,
                                     headers={"Content-Type": f"application/json; charset={charset}"})
        assert status == 400, (charset, status, text[:300])
        # punycode is a text codec that fails with its own error (not a decode error) on such a body
        assert f"unknown charset '{charset}'" in text or f"not valid {charset} text" in text
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
    """The real search SQL, counting each time a search reads the database."""

    runs = 0

    async def together(self, work: Callable[[SqliteSearchReads], T]) -> T:
        self.runs += 1
        return await super().together(work)


@pytest.fixture
def counted(api: Api) -> CountingSearchRepository:
    repository = CountingSearchRepository(api.rt.core.db)
    api.rt.search = MemorySearchService(repository)
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
    # A header line too long for aiohttp: its start, the token, must not reach the log.
    status, _, _ = await _raw(api, "GET", "/api/v1/memory/1/files",
                              headers={"Authorization": "Bearer s3cret-token-e" + "a" * 9000})
    assert status == 400
    assert _tracebacks(caplog) == []
    refused = [r.getMessage() for r in caplog.records if "malformed HTTP" in r.getMessage()]
    assert refused == ["API request refused as malformed HTTP (LineTooLong)"] * 2
    assert not any("s3cret" in r.getMessage() or "s3cret" in str(r.args) for r in caplog.records)


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
        return [r.getMessage() for r in caplog.records if r.name == "bot.app.api.server" and "left" in r.getMessage()]

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
