"""A pass-through HTTP proxy between matebot and the model server that keeps a record of each request.

The lanes put it in front of llama-server to count from outside what matebot asked: which
requests were memory extractions (known by the extraction prompt's own words), whether an
extraction's body was byte for byte one sent before (a retry that learned nothing), and the
server's own timings of each answer (`timings`, which llama-server adds to its OpenAI-style
answers, streamed ones in the last event). Method, path, headers and body go upstream as
they came; the answer, SSE included, comes back unchanged as it arrives.

`async with RecordingProxy(url)` serves on the running loop; `with RecordingProxy(url)` on a
loop in a thread of its own, for a lane that waits on blocking calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web

# The first words of the extraction prompts (prompts/<locale>/memory/summarize-system.md.j2 and
# summarize-group-system.md.j2, wherever the request carries them: the system prompt, or a user
# message when the extraction reuses the chat's prefix); tests/scripts keeps them in step.
EXTRACTION_MARKERS = ("You maintain the long-term memory of a chat assistant", "你负责维护一个聊天助手",
                      # a group member asked about alone (a small model's group extraction)
                      "list the facts they told about themselves", "请列出此人说到的关于自己的事实")
# Paths that make the model write (a count_tokens or a health check is no model call).
GENERATION_PATHS = ("/v1/messages", "/v1/chat/completions", "/chat/completions", "/completion", "/completions")
_HOP_BY_HOP = frozenset({"host", "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                         "te", "trailer", "trailers", "transfer-encoding", "upgrade"})
_KEPT_ANSWER = 4 << 20  # bytes of an answer kept for its timings and usage; the rest only passes through


@dataclass(slots=True)
class ProxyRecord:
    """One request as it went through: what was sent, and what came back."""
    method: str
    path: str
    sha256: str
    size: int
    extraction: bool
    generation: bool
    started: float  # time.monotonic()
    finished: float | None = None
    status: int | None = None
    timings: dict[str, Any] | None = None  # llama-server's, when its answer carried them
    output_tokens: int | None = None  # from the answer's usage, when it carried one
    error: str | None = None

    @property
    def raw_seconds(self) -> float | None:
        """The server's own time for this answer: its new prompt tokens and the tokens it wrote."""
        if not self.timings:
            return None
        try:
            return (float(self.timings["prompt_ms"]) + float(self.timings["predicted_ms"])) / 1000
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(slots=True)
class _Answer:
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0

    def keep(self, chunk: bytes) -> None:
        if self.size < _KEPT_ANSWER:
            self.chunks.append(chunk)
        self.size += len(chunk)


class RecordingProxy:
    """Forwards everything to `target` (a base URL: scheme, host, port) and records each request."""

    def __init__(self, target: str) -> None:
        self._target = target.rstrip("/")
        self._records: list[ProxyRecord] = []
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._port = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def records(self) -> list[ProxyRecord]:
        with self._lock:
            return list(self._records)

    def summary(self) -> dict[str, int]:
        """model_requests, extraction_requests, and extraction_prompts_repeated: extraction bodies
        byte-identical to an earlier extraction request."""
        records = self.records
        return {"model_requests": sum(r.generation for r in records), **extraction_counts(records)}

    # -- serving on the running loop ----------------------------------------------------

    async def __aenter__(self) -> RecordingProxy:
        # No proxy from the environment, no decompression: the answer's bytes pass as they came.
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False,
                                              skip_auto_headers=("Accept-Encoding",),
                                              trust_env=False)
        app = web.Application(client_max_size=256 << 20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # -- serving on a thread of its own -------------------------------------------------

    def __enter__(self) -> RecordingProxy:
        loop = asyncio.new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.__aenter__())
            except BaseException as exc:  # handed to the caller below
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=serve, name="recording-proxy", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self.__aexit__(None, None, None), loop).result(30)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
        self._loop = self._thread = None

    # -- one request --------------------------------------------------------------------

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        record = ProxyRecord(method=request.method, path=request.path, sha256=hashlib.sha256(body).hexdigest(),
                             size=len(body), extraction=is_extraction(body),
                             generation=request.method == "POST" and request.path.endswith(GENERATION_PATHS),
                             started=time.monotonic())
        with self._lock:
            self._records.append(record)
        # Accept-Encoding stays behind: an answer that came compressed could not be read for its timings.
        headers = [(k, v) for k, v in request.headers.items()
                   if k.lower() not in _HOP_BY_HOP | {"content-length", "accept-encoding"}]
        answer = _Answer()
        response: web.StreamResponse | None = None
        encoding = ""
        try:
            async with self._session.request(request.method, self._target + request.path_qs, headers=headers,
                                             data=body or None, allow_redirects=False) as upstream:
                encoding = upstream.headers.get("Content-Encoding", "")
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for key, value in upstream.headers.items():
                    if key.lower() not in _HOP_BY_HOP:
                        response.headers.add(key, value)
                record.status = upstream.status
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    answer.keep(chunk)
                    await response.write(chunk)
                await response.write_eof()
        except aiohttp.ClientError as exc:
            record.error = f"{type(exc).__name__}: {exc}"
            if response is None or not response.prepared:
                record.status = 502
                return web.Response(status=502, text=f"recording proxy: upstream failed: {record.error}")
            raise  # cut mid-answer: the client sees the cut, as it would have without the proxy
        finally:
            record.finished = time.monotonic()
            if encoding in ("", "identity"):
                record.timings, record.output_tokens = answer_facts(b"".join(answer.chunks))
        return response


# -- what a request and its answer say -------------------------------------------------


def is_extraction(body: bytes) -> bool:
    """Whether a request body (JSON) carries a memory extraction's prompt, in any of its texts."""
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return any(marker in text for text in _texts(data) for marker in EXTRACTION_MARKERS)


def _texts(value: Any) -> Iterator[str]:
    """Every string in a JSON value (a body's system prompt, messages, blocks...)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)
    elif isinstance(value, dict):
        for key in ("system", "messages", "content", "text", "input"):
            if key in value:
                yield from _texts(value[key])


def answer_facts(raw: bytes) -> tuple[dict[str, Any] | None, int | None]:
    """(llama-server's `timings`, the output token count) of an answer: a JSON body or SSE events."""
    timings: dict[str, Any] | None = None
    output: int | None = None
    for event in _events(raw):
        if isinstance(event.get("timings"), dict):
            timings = event["timings"]
        for usage in (event.get("usage"), (event.get("message") or {}).get("usage")
                      if isinstance(event.get("message"), dict) else None):
            if isinstance(usage, dict):
                count = usage.get("output_tokens", usage.get("completion_tokens"))
                if isinstance(count, int):
                    output = count
    return timings, output


def _events(raw: bytes) -> Iterator[dict[str, Any]]:
    text = raw.decode("utf-8", errors="replace")
    with contextlib.suppress(ValueError):
        whole = json.loads(text)
        if isinstance(whole, dict):
            yield whole
        return
    for line in text.splitlines():
        if line.startswith("data:"):
            with contextlib.suppress(ValueError):
                event = json.loads(line[5:].strip())
                if isinstance(event, dict):
                    yield event


def extraction_counts(records: list[ProxyRecord]) -> dict[str, int]:
    """extraction_requests, and extraction_prompts_repeated: bodies byte-identical to an earlier one."""
    seen: set[str] = set()
    repeated = 0
    extractions = [r for r in records if r.extraction]
    for record in extractions:
        repeated += record.sha256 in seen
        seen.add(record.sha256)
    return {"extraction_requests": len(extractions), "extraction_prompts_repeated": repeated}
