"""A scriptable fake of OpenAI-compatible Chat Completions (`POST /v1/chat/completions`) that the real openai SDK talks to.

Scripted like FakeAnthropic, with the same script objects (TextReply, ToolUseReply,
ErrorReply, DisconnectReply, CustomReply), so one scenario runs on both protocols. It
behaves as the real services do where matrix code depends on it:
- usage computed from the request (text ~4 characters a token, 4 tokens of framing per
  message), `prompt_tokens_details.cached_tokens` for a prefix repeated within 10 minutes
  (1 024 tokens at least, in steps of 128, as OpenAI caches);
- `finish_reason: "length"` with the answer cut at `max_tokens` / `max_completion_tokens`;
- streamed answers as `chat.completion.chunk` events, tool-call arguments split across
  chunks, usage in a last chunk when `stream_options.include_usage` asks for it, `[DONE]`;
- errors in OpenAI's body shape (`{"error": {"message", "type", "param", "code"}}`), a 429
  with `retry-after`, an HTML error page, and OpenAI's context-length error
  (`context_length_exceeded`) when a request exceeds `context_window`;
- the request checks OpenAI makes: every `tool` message answers a call of the assistant
  message before it, every call is answered, and no unknown keys such as `cache_control`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from aiohttp import web

from tests.support.fakes.anthropic import (
    CustomReply,
    DisconnectReply,
    ErrorReply,
    Handler,
    RecordedRequest,
    TextReply,
    ToolUseReply,
)
from tests.support.fakes.anthropic_billing import cut_to_tokens, estimate_tokens
from tests.support.fakes.anthropic_stall import DribbleReply, serve_dribble

CACHE_MIN_TOKENS = 1024
CACHE_STEP_TOKENS = 128
CACHE_TTL_S = 600.0
MESSAGE_FRAMING_TOKENS = 4
IMAGE_TOKENS = 255
PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class HtmlErrorReply:
    """A proxy's error page: an HTML body with this status."""

    status: int = 502
    delay: float = 0.0


Script = TextReply | ToolUseReply | ErrorReply | DisconnectReply | CustomReply | HtmlErrorReply | DribbleReply
Responder = Callable[[RecordedRequest], Script | None]

_MESSAGE_KEYS = {
    "system": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal"},
    "tool": {"role", "content", "tool_call_id"},
}


def prompt_text(body: dict[str, Any]) -> tuple[str, int, int]:
    """(the prompt as the model reads it, its message count, its image count)."""
    pieces: list[str] = []
    images = 0
    tools = body.get("tools") or []
    if tools:
        pieces.append(json.dumps(tools, sort_keys=True))
    messages = body.get("messages") or []
    for message in messages:
        pieces.append(f"<{message.get('role')}>")
        content = message.get("content")
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            for part in content:
                if part.get("type") == "text":
                    pieces.append(str(part.get("text", "")))
                else:
                    images += 1
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            pieces.append(f"{function.get('name')}({function.get('arguments')})")
    return "\n".join(pieces), len(messages), images


def system_of(body: dict[str, Any]) -> str:
    """The system message's text ('' without one)."""
    for message in body.get("messages") or []:
        if message.get("role") in ("system", "developer") and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def messages_view(body: dict[str, Any]) -> dict[str, Any]:
    """A chat body seen as a Messages API body ({system, messages of blocks}), so a responder
    written for FakeAnthropic can read it: tool calls as tool_use blocks, tool messages as
    tool_result blocks in the user turn they belong to."""
    messages: list[dict[str, Any]] = []
    for message in body.get("messages") or []:
        role, content = message.get("role"), message.get("content")
        if role in ("system", "developer"):
            continue
        if role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                               "input": arguments})
            messages.append({"role": "assistant", "content": blocks})
            continue
        if role == "tool":
            block: Any = {"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": content}
            parts: list[Any] = [block]
        elif isinstance(content, str):
            parts = [{"type": "text", "text": content}]
        else:
            parts = [p if p.get("type") == "text" else {"type": "image"} for p in content or []]
        if messages and messages[-1]["role"] == "user" and (role == "user" or messages[-1].get("_tools")):
            messages[-1]["content"].extend(parts)
        else:
            messages.append({"role": "user", "content": parts, **({"_tools": True} if role == "tool" else {})})
    for message in messages:
        message.pop("_tools", None)
        content = message["content"]
        if message["role"] == "user" and len(content) == 1 and content[0].get("type") == "text":
            message["content"] = content[0]["text"]
    return {"system": system_of(body), "messages": messages}


def chat_problem(body: dict[str, Any]) -> str | None:
    """What OpenAI would refuse in this request body, or None."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    if "max_tokens" in body and "max_completion_tokens" in body:
        return "max_tokens and max_completion_tokens cannot both be set"
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _MESSAGE_KEYS:
            return f"messages[{index}].role: invalid value {role!r}"
        unknown = set(message) - _MESSAGE_KEYS[role]
        if unknown:
            return f"messages[{index}]: unrecognized keys {sorted(unknown)}"
        if "cache_control" in json.dumps(message.get("content")):
            return f"messages[{index}].content: unrecognized key 'cache_control'"
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                return ("Invalid parameter: messages with role 'tool' must be a response to a preceding "
                        "message with 'tool_calls'.")
            open_calls.discard(message["tool_call_id"])
            continue
        if open_calls:
            return ("An assistant message with 'tool_calls' must be followed by tool messages responding to "
                    f"each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                    f"{', '.join(sorted(open_calls))}")
        if role == "assistant":
            open_calls = {str(call.get("id")) for call in message.get("tool_calls") or []}
            if message.get("content") is None and not open_calls:
                return f"messages[{index}].content: expected a string, got null"
        elif message.get("content") is None:
            return f"messages[{index}].content: expected a string or an array, got null"
    for tool in body.get("tools") or []:
        if tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            return "tools: each tool is {type: function, function: {...}}"
    return None


class PrefixCache:
    """OpenAI's automatic prompt caching: the longest prefix seen within the lifetime, cut to 128-token steps."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._seen: dict[str, float] = {}
        self.enabled = True

    def cached_tokens(self, prompt: str) -> int:
        if not self.enabled:
            return 0
        now = self._now()
        self._seen = {text: at for text, at in self._seen.items() if now - at <= CACHE_TTL_S}
        best, source = "", None
        for earlier in self._seen:
            common = _common_prefix(earlier, prompt)
            if len(common) > len(best):
                best, source = common, earlier
        if source is not None:
            self._seen[source] = now  # a hit keeps the entry warm
        self._seen[prompt] = now
        tokens = estimate_tokens(best)
        if tokens < CACHE_MIN_TOKENS:
            return 0
        return CACHE_MIN_TOKENS + (tokens - CACHE_MIN_TOKENS) // CACHE_STEP_TOKENS * CACHE_STEP_TOKENS


def _common_prefix(a: str, b: str) -> str:
    low, high = 0, min(len(a), len(b))
    while low < high:  # binary search on the prefix length: a[:n] == b[:n] is monotone in n
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return a[:low]


class FakeOpenAIChat:
    """Serve a fake Chat Completions API on 127.0.0.1; use as `async with FakeOpenAIChat() as fake:`."""

    def __init__(self, *, default_text: str = "ok", latency: float = 0.0, ttft: float = 0.0,
                 tokens_per_s: float | None = None, context_window: int | None = None) -> None:
        self.default_text = default_text
        self.latency = latency
        self.ttft = ttft
        self.tokens_per_s = tokens_per_s
        self.context_window = context_window
        self.responder: Responder | None = None
        self.requests: list[RecordedRequest] = []
        self.url = ""  # the server's root; the SDK's base URL is url + "/v1"
        self.now: Callable[[], float] = time.monotonic
        self.cache = PrefixCache(lambda: self.now())
        self._queue: deque[Script] = deque()
        self._runner: web.AppRunner | None = None
        self._inflight: set[asyncio.Task[Any]] = set()
        self._counter = 0

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    async def __aenter__(self) -> FakeOpenAIChat:
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        for task in list(self._inflight):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- scripting (the same calls as FakeAnthropic) ------------------------------------

    def push(self, script: Script) -> None:
        self._queue.append(script)

    def reply_text(self, text: str, *, input_tokens: int | None = None, output_tokens: int | None = None,
                   stop_reason: str = "end_turn", delay: float = 0.0) -> None:
        self.push(TextReply(text, input_tokens, output_tokens, stop_reason, delay))

    def reply_tool_use(self, name: str, input: dict[str, Any], *, tool_use_id: str | None = None,
                       text: str | None = None, delay: float = 0.0) -> None:
        self.push(ToolUseReply(name, input, tool_use_id=tool_use_id, text=text, delay=delay))

    def reply_raw_tool_use(self, name: str, raw_input_json: str, *, text: str | None = None) -> None:
        self.push(ToolUseReply(name, raw_input_json=raw_input_json, text=text))

    def reply_error(self, status: int, error_type: str, message: str, *, retry_after: float | None = None,
                    delay: float = 0.0) -> None:
        self.push(ErrorReply(status, error_type, message, retry_after, delay))

    def reply_prompt_too_long(self, actual: int = 130000, maximum: int = 128000) -> None:
        self.push(context_length_error(actual, maximum))

    def reply_html_error(self, status: int = 502) -> None:
        self.push(HtmlErrorReply(status))

    def reply_disconnect(self, *, delay: float = 0.0) -> None:
        self.push(DisconnectReply(delay))

    def reply_with(self, handler: Handler) -> None:
        self.push(CustomReply(handler))

    def pending(self) -> int:
        return len(self._queue)

    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the POST /v1/chat/completions requests, in arrival order."""
        return [r.body for r in self.requests if r.path == PATH]

    messages_requests = chat_requests  # the name FakeAnthropic's tests use

    # -- serving --------------------------------------------------------------------------

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
        recorded = RecordedRequest(path=request.path, headers={k.lower(): v for k, v in request.headers.items()},
                                   body=body if isinstance(body, dict) else {},
                                   time=asyncio.get_running_loop().time(), at=self.now())
        self.requests.append(recorded)
        if request.method != "POST" or request.path != PATH:
            return _error(404, "invalid_request_error", f"Invalid URL ({request.method} {request.path})")
        if not isinstance(body, dict):
            return _error(400, "invalid_request_error", "We could not parse the JSON body of your request.")
        problem = chat_problem(body)
        if problem is not None:
            return _error(400, "invalid_request_error", problem)
        script = self._next_script(recorded)
        delay = self.latency + getattr(script, "delay", 0.0)
        if delay > 0:
            await asyncio.sleep(delay)
        if isinstance(script, TextReply) and script.hold is not None:
            await script.hold()
        return await self._answer(request, recorded, script)

    def _next_script(self, recorded: RecordedRequest) -> Script:
        tokens = self._prompt_tokens(recorded.body)
        if self.context_window is not None and tokens > self.context_window:
            return context_length_error(tokens, self.context_window)
        if self.responder is not None:
            script = self.responder(recorded)
            if script is not None:
                return script
        if self._queue:
            return self._queue.popleft()
        return TextReply(self.default_text)

    @staticmethod
    def _prompt_tokens(body: dict[str, Any]) -> int:
        prompt, messages, images = prompt_text(body)
        return estimate_tokens(prompt) + MESSAGE_FRAMING_TOKENS * messages + IMAGE_TOKENS * images + 3

    async def _answer(self, request: web.Request, recorded: RecordedRequest, script: Script) -> web.StreamResponse:
        if isinstance(script, ErrorReply):
            headers = {"retry-after": str(script.retry_after)} if script.retry_after is not None else {}
            return _error(script.status, script.error_type, script.message, headers,
                          code=getattr(script, "code", None))
        if isinstance(script, HtmlErrorReply):
            page = f"<html><head><title>{script.status}</title></head><body><h1>Bad Gateway</h1></body></html>"
            return web.Response(status=script.status, text=page, content_type="text/html")
        if isinstance(script, DisconnectReply):
            assert request.transport is not None
            request.transport.abort()
            raise asyncio.CancelledError
        if isinstance(script, CustomReply):
            result = script.handler(recorded)
            if isinstance(result, dict):
                return web.json_response(result)
            return await result
        if isinstance(script, DribbleReply):
            return await serve_dribble(request, script)
        body = recorded.body
        prompt, _, _ = prompt_text(body)
        prompt_tokens = script.input_tokens if script.input_tokens is not None else self._prompt_tokens(body)
        cached = min(self.cache.cached_tokens(prompt), prompt_tokens)
        answer = self._shape(body, script)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": answer["output_tokens"],
                 "total_tokens": prompt_tokens + answer["output_tokens"],
                 "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                 "completion_tokens_details": {"reasoning_tokens": 0}}
        recorded.usage = usage
        model = str(body.get("model"))
        cut = script.break_after_chars if isinstance(script, TextReply) else None
        if body.get("stream"):
            return await self._stream(request, model, answer, usage if _wants_usage(body) else None, cut)
        if cut is not None:
            return await self._answer(request, recorded, DisconnectReply())
        if self.ttft or self.tokens_per_s:
            await asyncio.sleep(self.ttft + (answer["output_tokens"] / self.tokens_per_s if self.tokens_per_s else 0))
        message: dict[str, Any] = {"role": "assistant", "content": answer["text"], "refusal": None}
        if answer["calls"]:
            message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                     for i, n, a in answer["calls"]]
        return web.json_response({
            "id": self._next_id("chatcmpl"), "object": "chat.completion", "created": int(time.time()),
            "model": model, "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer["finish"]}],
            "usage": usage,
        })

    def _shape(self, body: dict[str, Any], script: TextReply | ToolUseReply) -> dict[str, Any]:
        budget = body.get("max_completion_tokens", body.get("max_tokens"))
        budget = budget if isinstance(budget, int) and budget > 0 else None
        text = script.text or ""
        calls: list[tuple[str, str, str]] = []
        if isinstance(script, ToolUseReply):
            raw = script.raw_input_json if script.raw_input_json is not None else json.dumps(script.input)
            calls.append((script.tool_use_id or self._next_id("call"), script.name, raw))
            calls.extend((self._next_id("call"), name, json.dumps(arguments)) for name, arguments in script.more)
        wanted = estimate_tokens(text) + sum(estimate_tokens(a) + 4 for _, _, a in calls)
        finish = "tool_calls" if calls else "stop"
        if isinstance(script, TextReply) and script.stop_reason == "max_tokens":
            finish = "length"
        output = script.output_tokens if script.output_tokens is not None else wanted
        if budget is not None and wanted > budget:
            finish, output = "length", budget
            text = cut_to_tokens(text, budget)
            left = budget - estimate_tokens(text)
            cut_calls = []
            for call_id, name, arguments in calls:
                if left <= 0:
                    break
                piece = cut_to_tokens(arguments, left)
                cut_calls.append((call_id, name, piece))
                left -= estimate_tokens(piece) + 4
            calls = cut_calls
        return {"text": text or None, "calls": calls, "finish": finish, "output_tokens": output}

    async def _stream(self, request: web.Request, model: str, answer: dict[str, Any],
                      usage: dict[str, Any] | None, break_after: int | None) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk_id = self._next_id("chatcmpl")
        created = int(time.time())

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            chunk = {"id": chunk_id, "object": "chat.completion.chunk", "created": created, "model": model,
                     "system_fingerprint": "fp_fake",
                     "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": "", "refusal": None})
        if self.ttft > 0:
            await asyncio.sleep(self.ttft)
        sent = 0
        for piece in _pieces(answer["text"] or "", paced=self.tokens_per_s is not None):
            await send({"content": piece})
            sent += len(piece)
            if break_after is not None and sent >= break_after:
                # The connection drops mid-answer: closed after what was written is flushed (an abort's
                # reset could discard it before the client read it), with no end of the chunked body.
                assert request.transport is not None
                request.transport.close()
                raise asyncio.CancelledError
            if self.tokens_per_s:
                await asyncio.sleep(estimate_tokens(piece) / self.tokens_per_s)
        for index, (call_id, name, arguments) in enumerate(answer["calls"]):
            await send({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                        "function": {"name": name, "arguments": ""}}]})
            for piece in _pieces(arguments, paced=False):  # arguments split across chunks, as OpenAI sends them
                await send({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        await send({}, answer["finish"])
        if usage is not None:
            final = {"id": chunk_id, "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [], "usage": usage}
            await response.write(f"data: {json.dumps(final)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _next_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_fake{self._counter:06d}"


def _wants_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def _pieces(text: str, *, paced: bool) -> list[str]:
    """Up to three pieces (or ~4-token pieces when paced); nothing for empty text."""
    if not text:
        return []
    if paced:
        pieces = []
        while text:
            piece = cut_to_tokens(text, 4) or text[0]
            pieces.append(piece)
            text = text[len(piece):]
        return pieces
    size = max(1, -(-len(text) // 3))
    return [text[i:i + size] for i in range(0, len(text), size)]


@dataclass(frozen=True)
class _CodedError(ErrorReply):
    code: str | None = None


def context_length_error(actual: int, maximum: int) -> ErrorReply:
    """OpenAI's answer to a prompt over the model's context window."""
    return _CodedError(400, "invalid_request_error",
                       f"This model's maximum context length is {maximum} tokens. However, your messages resulted "
                       f"in {actual} tokens. Please reduce the length of the messages.", code="context_length_exceeded")


def _error(status: int, error_type: str, message: str, headers: dict[str, str] | None = None,
           code: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return web.json_response(body, status=status, headers=headers or {})
