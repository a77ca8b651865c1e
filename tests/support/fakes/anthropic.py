"""A scriptable fake of the Anthropic Messages API that the real SDK can talk to over HTTP."""

from __future__ import annotations

import re

import asyncio
import json
import time
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from tests.support.fakes.anthropic_billing import (
    CacheUsage,
    PromptCache,
    cache_problem,
    cut_to_tokens,
    estimate_tokens,
    media_problem,
    request_tokens,
)
from tests.support.fakes.anthropic_stall import DribbleReply, StalledReply, serve_dribble, serve_stall

# What the SDK does with reply_raw_tool_use (anthropic 2.16):
# - non-streaming: models are built without validation, so a non-object input
#   (e.g. '"oops"' or '[1, 2]') arrives unchanged as ToolUseBlock.input (a str /
#   list, despite the Dict annotation); text that is not JSON at all makes the
#   whole body unparsable and messages.create raises a bare json.JSONDecodeError
#   (a ValueError, not an anthropic error, and not retried).
# - streaming: the raw text is sent as one input_json_delta; the SDK parses it
#   with jiter in partial mode, so '"oops"' becomes the str "oops", a truncated
#   object like '{"a": 1' is accepted as {"a": 1}, and garbage raises ValueError
#   ("Unable to parse tool parameter JSON ...") while iterating the stream.


@dataclass
class RecordedRequest:
    """One HTTP request as the fake received it."""

    path: str
    headers: dict[str, str]  # keys lower-cased so lookups don't depend on client casing
    body: dict[str, Any]
    time: float  # loop.time() on arrival
    at: float = 0.0  # the cache's clock (FakeAnthropic.now) on arrival: simulated time where a test moves it
    usage: dict[str, Any] | None = None  # what the answer billed, once answered (None: no answer was billed)


@dataclass(frozen=True)
class TextReply:
    """A single text block answer."""

    text: str
    input_tokens: int | None = None  # None: computed from the request, as the real API does
    output_tokens: int | None = None  # None: computed from the (possibly cut) answer
    stop_reason: str = "end_turn"
    delay: float = 0.0
    # The connection drops once this many characters were streamed (no answer at all
    # when not streaming): a network cut half-way through an answer.
    break_after_chars: int | None = None
    # Awaited before answering (after `delay`): a test holds the answer until a condition holds.
    hold: Callable[[], Awaitable[None]] | None = None


@dataclass(frozen=True)
class ToolUseReply:
    """A tool_use answer; raw_input_json, when set, is spliced in verbatim instead of input.

    `more`: further (name, input) calls in the same answer, as a model calls several tools at
    once; an answer cut at max_tokens loses them.
    """

    name: str
    input: dict[str, Any] = field(default_factory=dict)
    raw_input_json: str | None = None
    tool_use_id: str | None = None
    text: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    delay: float = 0.0
    more: tuple[tuple[str, dict[str, Any]], ...] = ()


@dataclass(frozen=True)
class ErrorReply:
    """An API error with the official error body shape."""

    status: int
    error_type: str
    message: str
    retry_after: float | None = None
    delay: float = 0.0
    # Streaming requests get a 200 event stream that starts, then carries this error as an
    # `error` event, as the real API does when it is overloaded mid-answer.
    in_stream: bool = False


@dataclass(frozen=True)
class DisconnectReply:
    """Drop the connection without sending any response."""

    delay: float = 0.0


Handler = Callable[[RecordedRequest], "Awaitable[web.StreamResponse] | dict[str, Any]"]


@dataclass(frozen=True)
class CustomReply:
    """Delegate the answer to a test-provided handler (a dict is sent as a 200 JSON body)."""

    handler: Handler


_RAW_SENTINEL = "__fake_anthropic_raw_tool_input__"

@dataclass(frozen=True)
class _Answer:
    """A success answer as sent: content blocks, stop reason and usage."""

    blocks: list[dict[str, Any]]
    stop_reason: str
    input_tokens: int
    output_tokens: int
    raw_input: str | None  # the tool input JSON as streamed (cut when max_tokens ran out)
    splice: str | None  # raw tool input text sent verbatim in the JSON body
    cache: CacheUsage | None = None  # None: the script set input_tokens itself

    def usage(self, output_tokens: int) -> dict[str, Any]:
        return _usage(self.cache or CacheUsage(self.input_tokens), output_tokens)


def _usage(cache: CacheUsage, output_tokens: int) -> dict[str, Any]:
    """The usage object as the API sends it, cache writes split by lifetime."""
    return {"input_tokens": cache.input_tokens, "output_tokens": output_tokens,
            "cache_creation_input_tokens": cache.cache_creation_input_tokens,
            "cache_read_input_tokens": cache.cache_read_input_tokens,
            "cache_creation": {"ephemeral_5m_input_tokens": cache.ephemeral_5m_input_tokens,
                               "ephemeral_1h_input_tokens": cache.ephemeral_1h_input_tokens}}


Script = TextReply | ToolUseReply | ErrorReply | DisconnectReply | CustomReply | StalledReply | DribbleReply
Responder = Callable[[RecordedRequest], Script | None]


class FakeAnthropic:
    """Serve a fake Messages API on 127.0.0.1; use as `async with FakeAnthropic() as fake:`."""

    def __init__(
        self, *, default_text: str = "ok", latency: float = 0.0, ttft: float = 0.0,
        tokens_per_s: float | None = None,
    ) -> None:
        """`ttft` and `tokens_per_s` pace answers as a real model does: the first token after
        `ttft` seconds, then `tokens_per_s` (a non-streaming answer arrives when all are done)."""
        self.default_text = default_text
        self.latency = latency
        self.ttft = ttft
        self.tokens_per_s = tokens_per_s
        self.responder: Responder | None = None
        self.requests: list[RecordedRequest] = []
        self.url = ""
        self._queue: deque[Script] = deque()
        self._runner: web.AppRunner | None = None
        self._inflight: set[asyncio.Task[Any]] = set()
        self._counter = 0
        self.stalled_open = 0  # StalledReply answers whose client is still connected
        self.now: Callable[[], float] = time.monotonic  # the cache's clock; tests may move it on
        self.cache = PromptCache(lambda: self.now())

    # -- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> FakeAnthropic:
        app = web.Application(client_max_size=32 * 1024 * 1024)  # the real API takes requests up to 32 MB
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that times out or disconnects should not
        # leave a sleeping handler behind to delay shutdown.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Cancel handlers still sleeping (latency/delay) so shutdown is immediate.
        for task in list(self._inflight):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- scripting -----------------------------------------------------------

    def push(self, script: Script) -> None:
        """Append an already-built script to the FIFO queue."""
        self._queue.append(script)

    def reply_text(
        self,
        text: str,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        stop_reason: str = "end_turn",
        delay: float = 0.0,
    ) -> None:
        self.push(TextReply(text, input_tokens, output_tokens, stop_reason, delay))

    def reply_tool_use(
        self,
        name: str,
        input: dict[str, Any],
        *,
        tool_use_id: str | None = None,
        text: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        delay: float = 0.0,
    ) -> None:
        self.push(
            ToolUseReply(
                name,
                input,
                tool_use_id=tool_use_id,
                text=text,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                delay=delay,
            )
        )

    def reply_raw_tool_use(
        self,
        name: str,
        raw_input_json: str,
        *,
        tool_use_id: str | None = None,
        text: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        delay: float = 0.0,
    ) -> None:
        """Script a tool_use whose input text is sent verbatim (see module comment for SDK behaviour)."""
        self.push(
            ToolUseReply(
                name,
                raw_input_json=raw_input_json,
                tool_use_id=tool_use_id,
                text=text,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                delay=delay,
            )
        )

    def reply_error(
        self,
        status: int,
        error_type: str,
        message: str,
        *,
        retry_after: float | None = None,
        delay: float = 0.0,
    ) -> None:
        self.push(ErrorReply(status, error_type, message, retry_after, delay))

    def reply_prompt_too_long(self, actual: int = 210000, maximum: int = 200000) -> None:
        self.reply_error(400, "invalid_request_error", f"prompt is too long: {actual} tokens > {maximum} maximum")

    def reply_disconnect(self, *, delay: float = 0.0) -> None:
        self.push(DisconnectReply(delay))

    def reply_with(self, handler: Handler) -> None:
        self.push(CustomReply(handler))

    def pending(self) -> int:
        """Number of scripted replies not yet consumed."""
        return len(self._queue)

    def messages_requests(self) -> list[dict[str, Any]]:
        """Bodies of the POST /v1/messages requests, in arrival order."""
        return [r.body for r in self.requests if r.path == "/v1/messages"]

    # -- serving -------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        try:
            return await self._dispatch(request)
        finally:
            self._inflight.discard(task)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        # Record before answering so tests see requests that got errors or hung.
        recorded = RecordedRequest(
            path=request.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body if isinstance(body, dict) else {},
            time=asyncio.get_running_loop().time(),
            at=self.now(),
        )
        self.requests.append(recorded)
        if not isinstance(body, dict):
            return self._error(ErrorReply(400, "invalid_request_error", "request body is not a JSON object"))
        if request.method == "POST" and request.path == "/v1/messages/count_tokens":
            return web.json_response({"input_tokens": request_tokens(body)})
        if (problem := media_problem(body) or cache_problem(body)) is not None:
            return self._error(ErrorReply(400, "invalid_request_error", problem))
        if request.method != "POST" or request.path != "/v1/messages":
            return self._error(ErrorReply(404, "not_found_error", f"{request.method} {request.path} not found"))

        # The script is chosen on arrival so queue order follows arrival order
        # even when answers are delayed.
        script = self._next_script(recorded)
        delay = self.latency + getattr(script, "delay", 0.0)
        if delay > 0:
            await asyncio.sleep(delay)
        if isinstance(script, TextReply) and script.hold is not None:
            await script.hold()
        return await self._answer(request, recorded, script)

    def _next_script(self, recorded: RecordedRequest) -> Script:
        if self.responder is not None:
            script = self.responder(recorded)
            if script is not None:
                return script
        if self._queue:
            return self._queue.popleft()
        return TextReply(self.default_text)

    async def _answer(self, request: web.Request, recorded: RecordedRequest, script: Script) -> web.StreamResponse:
        if isinstance(script, ErrorReply):
            if script.in_stream and recorded.body.get("stream"):
                return await self._stream_error(request, recorded, script)
            return self._error(script)
        if isinstance(script, DisconnectReply):
            assert request.transport is not None
            request.transport.abort()
            # Raising is how aiohttp abandons a request without writing anything.
            raise asyncio.CancelledError
        if isinstance(script, StalledReply):
            return await self._stall(request, recorded, script)
        if isinstance(script, DribbleReply):
            return await serve_dribble(request, script)
        if isinstance(script, CustomReply):
            result = script.handler(recorded)
            if isinstance(result, dict):
                return web.json_response(result)
            return await result
        model = str(recorded.body.get("model", "claude-fake"))
        answer = self._shape(recorded.body, script)
        recorded.usage = answer.usage(answer.output_tokens)
        cut = script.break_after_chars if isinstance(script, TextReply) else None
        if cut is not None and not recorded.body.get("stream"):
            return await self._answer(request, recorded, DisconnectReply())
        if recorded.body.get("stream"):
            return await self._stream(request, model, answer, cut)
        generation = self.ttft + (answer.output_tokens / self.tokens_per_s if self.tokens_per_s else 0.0)
        if generation > 0:
            await asyncio.sleep(generation)
        return self._json_message(model, answer)

    def _next_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_fake{self._counter:06d}"

    def _shape(self, body: dict[str, Any], script: TextReply | ToolUseReply) -> _Answer:
        """What the real API would send for this script: cut at max_tokens, usage counted."""
        budget = body.get("max_tokens")
        budget = budget if isinstance(budget, int) and budget > 0 else None
        text = script.text
        raw_input: str | None = None
        if isinstance(script, ToolUseReply):
            raw_input = script.raw_input_json if script.raw_input_json is not None else json.dumps(script.input)
        default_stop = script.stop_reason if isinstance(script, TextReply) else "tool_use"
        more = script.more if isinstance(script, ToolUseReply) else ()
        wanted = (estimate_tokens(text or "") + estimate_tokens(raw_input or "")
                  + sum(estimate_tokens(json.dumps(arguments)) for _, arguments in more))
        stop_reason, cut = default_stop, False
        if budget is not None and wanted > budget:
            stop_reason, cut = "max_tokens", True
            text = cut_to_tokens(text or "", budget) if text is not None else None
            left = budget - estimate_tokens(text or "")
            raw_input = cut_to_tokens(raw_input, left) if raw_input is not None else None
        output = script.output_tokens
        if output is None or cut:
            output = min(wanted, budget) if cut and budget is not None else wanted
        cache: CacheUsage | None = None
        if script.input_tokens is not None:
            input_tokens = script.input_tokens
        else:
            cache = self.cache.usage(body)
            input_tokens = cache.input_tokens
        blocks: list[dict[str, Any]] = []
        if text is not None:
            blocks.append({"type": "text", "text": text})
        tool_input: Any = None
        if isinstance(script, ToolUseReply) and raw_input is not None:
            if cut:
                # A tool call cut mid-input: the streamed JSON stops where the budget ran out;
                # the assembled (non-streaming) block carries no usable input.
                tool_input = {}
            else:
                tool_input = script.input if script.raw_input_json is None else _RAW_SENTINEL
            blocks.append({
                "type": "tool_use",
                "id": script.tool_use_id or self._next_id("toolu"),
                "name": script.name,
                "input": tool_input,
            })
            if not cut:
                blocks.extend({"type": "tool_use", "id": self._next_id("toolu"), "name": name, "input": arguments}
                              for name, arguments in more)
        splice = script.raw_input_json if isinstance(script, ToolUseReply) and tool_input == _RAW_SENTINEL else None
        return _Answer(blocks, stop_reason, input_tokens, output, raw_input, splice, cache)

    def _json_message(self, model: str, answer: _Answer) -> web.Response:
        message = {
            "id": self._next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": answer.blocks,
            "stop_reason": answer.stop_reason,
            "stop_sequence": None,
            "usage": answer.usage(answer.output_tokens),
        }
        text = json.dumps(message)
        if answer.splice is not None:
            # Splice the raw text in place of the placeholder so it is sent byte-for-byte.
            text = text.replace(json.dumps(_RAW_SENTINEL), answer.splice, 1)
        return web.Response(text=text, content_type="application/json", headers=self._headers())

    async def _stream(
        self, request: web.Request, model: str, answer: _Answer, break_after: int | None = None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={**self._headers(), "Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            await response.write(f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n".encode())

        message: dict[str, Any] = {
            "id": self._next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": answer.usage(1),
        }
        await send("message_start", {"message": message})
        await send("ping", {})
        first_tool = next((i for i, b in enumerate(answer.blocks) if b["type"] == "tool_use"), -1)
        if self.ttft > 0:
            await asyncio.sleep(self.ttft)
        for index, block in enumerate(answer.blocks):
            if block["type"] == "text":
                await send("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
                paced = self.tokens_per_s is not None and self.tokens_per_s > 0
                sent = 0
                for chunk in _paced_chunks(block["text"]) if paced else _chunks(block["text"]):
                    await send("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": chunk}})
                    sent += len(chunk)
                    if break_after is not None and sent >= break_after:
                        # The connection drops mid-answer: closed after what was written is flushed (an abort's
                        # reset could discard it before the client read it), with no end of the chunked body.
                        assert request.transport is not None
                        request.transport.close()
                        raise asyncio.CancelledError
                    if paced:
                        assert self.tokens_per_s is not None
                        await asyncio.sleep(estimate_tokens(chunk) / self.tokens_per_s)
            else:
                start = {**block, "input": {}}
                await send("content_block_start", {"index": index, "content_block": start})
                # Several deltas, as the real API does, so accumulation is exercised.
                raw = answer.raw_input if index == first_tool else json.dumps(block["input"])
                for chunk in _chunks(raw or ""):
                    delta = {"type": "input_json_delta", "partial_json": chunk}
                    await send("content_block_delta", {"index": index, "delta": delta})
            await send("content_block_stop", {"index": index})
        await send(
            "message_delta",
            {
                "delta": {"stop_reason": answer.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": answer.output_tokens},
            },
        )
        await send("message_stop", {})
        await response.write_eof()
        return response

    async def _stall(self, request: web.Request, recorded: RecordedRequest, script: StalledReply) -> web.StreamResponse:
        self.stalled_open += 1
        try:
            return await serve_stall(request, recorded.body, script, self._next_id("msg"), self._headers())
        finally:
            self.stalled_open -= 1

    async def _stream_error(self, request: web.Request, recorded: RecordedRequest, script: ErrorReply) -> web.StreamResponse:
        response = web.StreamResponse(headers={**self._headers(), "Content-Type": "text/event-stream"})
        await response.prepare(request)
        recorded.usage = _usage(self.cache.usage(recorded.body), 1)
        message: dict[str, Any] = {"id": self._next_id("msg"), "type": "message", "role": "assistant",
                   "model": str(recorded.body.get("model", "claude-fake")), "content": [],
                   "stop_reason": None, "stop_sequence": None, "usage": recorded.usage}
        error = {"type": "error", "error": {"type": script.error_type, "message": script.message}}
        for event, data in (("message_start", {"type": "message_start", "message": message}), ("error", error)):
            await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        await response.write_eof()
        return response

    def _error(self, script: ErrorReply) -> web.Response:
        headers = self._headers()
        if script.retry_after is not None:
            headers["retry-after"] = str(script.retry_after)
        body = {"type": "error", "error": {"type": script.error_type, "message": script.message}}
        return web.json_response(body, status=script.status, headers=headers)

    def _headers(self) -> dict[str, str]:
        return {"request-id": self._next_id("req")}


def _chunks(text: str, parts: int = 3) -> list[str]:
    """Split text into up to `parts` pieces; empty text still yields one (empty) piece."""
    if not text:
        return [""]
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _paced_chunks(text: str, tokens: int = 4) -> list[str]:
    """Pieces of about `tokens` tokens each, as a streaming model sends them."""
    pieces: list[str] = []
    while text:
        piece = cut_to_tokens(text, tokens) or text[0]
        pieces.append(piece)
        text = text[len(piece):]
    return pieces or [""]


_TIME_LABEL = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] ?")


def untimed(text: str) -> str:
    """A user message's text without the "[2026-12-03 10:46] " label matebot puts before it."""
    return _TIME_LABEL.sub("", text, count=1)


def system_text(body: dict[str, Any]) -> str:
    """A request's system prompt as one string, whether sent as text or as cached blocks."""
    system = body.get("system", "")
    if isinstance(system, list):
        return "".join(block.get("text", "") for block in system if isinstance(block, dict))
    return str(system or "")


def is_memory_extraction(body: dict[str, Any]) -> bool:
    """A memory extraction request: with its own prompt (the instructions are the system prompt)
    or through the chat's cached prefix (the chat's system prompt; the instructions open the
    first message). Its instructions name the reply's `should_update` field; a chat's never do."""
    messages = body.get("messages") or []
    first = messages[0].get("content") if messages and isinstance(messages[0], dict) else ""
    return "should_update" in system_text(body) or "should_update" in json.dumps(first, ensure_ascii=False)


def is_memory_request(recorded: RecordedRequest) -> bool:
    """A recorded request that is a memory extraction (see is_memory_extraction)."""
    return is_memory_extraction(recorded.body)
