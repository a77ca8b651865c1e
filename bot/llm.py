"""LLM port plus its two implementations: the Anthropic SDK and an offline stand-in."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from bot.config import LlmConfig
from bot.context.messages import TIME_LABEL, without_time
from bot.errors import LLMBusy, LLMError, PromptTooLong, StreamBroken
from bot.redaction import Redactor
from bot.text import storable

if TYPE_CHECKING:
    import anthropic

log = logging.getLogger(__name__)

_PROMPT_TOO_LONG = re.compile(r"prompt is too long|context_length_exceeded|maximum context length", re.I)


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    input: Any


@dataclass(frozen=True, slots=True)
class LLMRequest:
    model: str
    system: str
    messages: list[dict[str, Any]]
    max_tokens: int
    tools: list[dict[str, Any]] = field(default_factory=list)
    purpose: str = "chat"  # chat | summary | memory | emergence: for logs, usage rows and the offline client
    agent_id: int | None = None
    conversation_id: str | None = None
    # Prompt caching: the end of the system prompt (tools before it) is always a breakpoint;
    # system_split > 0 adds one after system[:system_split] (the base prompt, which outlives
    # workspace edits); cache_messages are indices of messages whose last block ends a prefix.
    cache: bool = True
    system_split: int = 0
    cache_messages: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class LLMResponse:
    text: str
    content: list[dict[str, Any]]
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str | None = None
    input_tokens: int = 0  # uncached input only, as the API reports it
    output_tokens: int = 0
    model: str = ""
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt, however it was billed."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


# Called with each piece of the answer's text as it streams in; must not block.
TextListener = Callable[[str], None]


class LLMClient(Protocol):
    async def complete(self, request: LLMRequest, on_text: TextListener | None = None) -> LLMResponse:
        """One Messages API call; raises PromptTooLong or LLMError (StreamBroken once text was streamed).

        With `on_text`, the answer is streamed where the client can, and the listener hears
        its text as it arrives; the response is the same either way.
        """
        ...


def is_prompt_too_long(message: str) -> bool:
    return bool(_PROMPT_TOO_LONG.search(message))


# Retried: timeouts, lock timeouts, rate limits, server errors and 529 overloaded.
_RETRY_STATUSES = frozenset({408, 409, 429})
# The longest a streamed answer may take in all: the SDK's own limit for one request.
STREAM_DEADLINE_S = 600.0
_BACKOFF_BASE = 0.5
_BACKOFF_MAX = 8.0


class AnthropicClient:
    """LLMClient over anthropic.AsyncAnthropic; the retry policy is ours (see _retry_delay)."""

    def __init__(self, config: LlmConfig, *, sdk: anthropic.AsyncAnthropic | None = None) -> None:
        # Imported here: the SDK takes ~1.5 s to import, which offline mode need not pay.
        import anthropic

        self._errors = anthropic
        self._transport_errors = _transport_errors()
        # The SDK would wait out any retry-after, even an hour: it does not retry, we do.
        options: dict[str, Any] = {"max_retries": 0, "timeout": config.timeout_seconds}
        if config.api_key:
            options["api_key"] = config.api_key
        elif config.base_url:  # local servers ignore the key, but the SDK insists on one
            options["api_key"] = "local"
        if config.base_url:
            options["base_url"] = config.base_url
        self._sdk = sdk or anthropic.AsyncAnthropic(**options)
        self._max_retries = config.max_retries
        self._timeout = config.timeout_seconds
        self._limit = asyncio.Semaphore(config.max_concurrency)
        # Upstream error texts end up in logs, replies and run records; a proxy may echo the key.
        self._redact = Redactor([config.api_key])
        # Turned off for good when the server shows it cannot do them (local servers, proxies).
        self._streaming = True
        self._caching = True

    async def __aenter__(self) -> AnthropicClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._sdk.close()

    async def complete(self, request: LLMRequest, on_text: TextListener | None = None) -> LLMResponse:
        uncached = not (self._caching and request.cache)
        params = _params(request if not uncached else replace(request, cache=False))
        shown: list[str] = []

        def listen(text: str) -> None:
            shown.append(text)
            assert on_text is not None
            on_text(text)

        attempt = 0
        while True:
            streamed = on_text is not None and self._streaming
            try:
                return await self._once(params, listen if streamed else None)
            except _NotStreamed:
                # A proxy or local server that answers `stream: true` with a plain body or refuses it.
                log.warning("the model API does not stream answers; asking without streaming from now on")
                self._streaming = False
            except _CacheRejected as rejected:
                if uncached:  # asked without cache_control already: the error is about something else
                    raise LLMError(f"request rejected: {rejected}") from None
                if self._caching:
                    log.warning("the model API refuses prompt caching (cache_control); sending requests without it")
                self._caching = False
                params, uncached = _params(replace(request, cache=False)), True
            except _Retryable as retry:
                if shown:  # the user saw part of an answer: a second one would not follow on
                    raise StreamBroken(retry.message, "".join(shown), billed=retry.billed) from None
                delay = self._retry_delay(retry, attempt)
                if delay is None:
                    raise LLMError(retry.message, billed=retry.billed) from None
                log.info("model API: %s; retrying in %.1f s", retry.message, delay)
                attempt += 1
                await asyncio.sleep(delay)
            except LLMError as exc:
                if shown and not isinstance(exc, StreamBroken):
                    raise StreamBroken(str(exc), "".join(shown), billed=exc.billed) from None
                raise

    def _retry_delay(self, retry: _Retryable, attempt: int) -> float | None:
        """Seconds to wait before the next try; None to give up now.

        A retry-after longer than timeout-seconds is not waited out: the user gets the
        apology now instead of an hour of "typing...".
        """
        if attempt >= self._max_retries:
            return None
        if retry.retry_after is not None:
            if retry.retry_after > self._timeout:
                retry.message += f" (asked to retry after {retry.retry_after:.0f} s)"
                return None
            return max(0.0, retry.retry_after)
        return min(_BACKOFF_BASE * 2 ** attempt, _BACKOFF_MAX) * (1 - 0.25 * random.random())

    async def _once(self, params: dict[str, Any], on_text: TextListener | None) -> LLMResponse:
        started: list[Any] = []  # the streamed message_start: what a broken answer was billed
        try:
            return await self._mapped(params, on_text, started)
        except (_Retryable, LLMError) as exc:
            if started and exc.billed is None:
                exc.billed = _usage_only(started[0])
            raise

    async def _mapped(self, params: dict[str, Any], on_text: TextListener | None, started: list[Any]) -> LLMResponse:
        anthropic = self._errors
        try:
            async with self._slot():
                if on_text is None:
                    message = await self._sdk.messages.create(**params)
                else:
                    message = await self._streamed(params, on_text, started)
        except anthropic.BadRequestError as exc:
            text = self._redact(_error_message(exc))
            if is_prompt_too_long(text):
                raise PromptTooLong(text) from None
            _raise_if_unsupported(text, params, streamed=on_text is not None)
            raise LLMError(f"request rejected: {text}") from None
        except anthropic.APIStatusError as exc:
            text = f"HTTP {exc.status_code}: {self._redact(_error_message(exc))}"
            if exc.status_code == 422:  # vLLM and other pydantic servers refuse unknown fields so
                _raise_if_unsupported(text, params, streamed=on_text is not None)
            if exc.status_code in _RETRY_STATUSES or exc.status_code >= 500 or _is_overload_event(exc):
                raise _Retryable(text, _retry_after(exc.response.headers)) from None
            raise LLMError(text) from None
        except anthropic.APITimeoutError:
            raise _Retryable("the model did not answer in time") from None
        except anthropic.APIConnectionError:
            raise _Retryable("cannot reach the model API") from None
        except self._transport_errors:  # the SDK passes a stream's read errors through as they are
            raise _Retryable("the connection to the model API broke off") from None
        except ValueError as exc:  # json.JSONDecodeError included: a malformed response body
            raise LLMError(f"malformed response from the model API: {self._redact(str(exc))[:200]}") from None
        try:
            return _response(message)
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            # A 200 that is not a Messages API answer: a proxy's HTML page, {"foo": 1}...
            raise LLMError(f"malformed response from the model API: {type(exc).__name__}") from None

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of the max-concurrency slots, waited for at most timeout-seconds.

        Stuck answers elsewhere must not queue a new message behind them for minutes: it
        gets the busy apology instead (LLMBusy is not retried, that would be more waiting).
        """
        try:
            async with asyncio.timeout(self._timeout):
                await self._limit.acquire()
        except TimeoutError:
            raise LLMBusy(f"no free model call slot within {self._timeout:g} s") from None
        try:
            yield
        finally:
            self._limit.release()

    async def _streamed(self, params: dict[str, Any], on_text: TextListener, started: list[Any]) -> Any:
        # The SDK drops pings before we see them, but they restart its read timeout: a
        # server that sends only pings would hold this call (and its slot) until the
        # whole-answer deadline. So the gap between the events we do see is bounded too.
        loop = asyncio.get_running_loop()
        gap = asyncio.timeout(self._timeout)
        try:
            async with asyncio.timeout(max(STREAM_DEADLINE_S, self._timeout)), gap:
                async with self._sdk.messages.stream(**params) as stream:
                    async for event in stream:
                        gap.reschedule(loop.time() + self._timeout)
                        if event.type == "message_start":
                            started.append(event.message)
                        elif event.type == "text" and event.text:
                            on_text(_safe(event.text))
                    if not started:
                        kind = stream.response.headers.get("content-type", "")
                        if "text/event-stream" not in kind:  # a plain body: the server does not stream
                            raise _NotStreamed()
                        raise _Retryable("the model's answer stream was empty")
                    message = await stream.get_final_message()
        except TimeoutError:
            if gap.expired():  # a stalled stream is a timeout like any other: retried
                raise _Retryable(f"the model's answer stream went silent for {self._timeout:g} s") from None
            # Not retried: the user has waited long enough for this answer.
            raise LLMError("the model's answer took too long") from None
        except (RuntimeError, IndexError, AttributeError, TypeError, KeyError) as exc:
            # The SDK's event accumulation trips over events out of order or malformed.
            raise LLMError(f"malformed stream from the model API: {type(exc).__name__}") from None
        if getattr(message, "stop_reason", None) is None:  # the stream ended before message_delta
            raise _Retryable("the model's answer stopped half-way")
        return message


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP library's own errors, whichever the installed SDK is built on."""
    import importlib

    found: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
            # StreamError is not an HTTPError: a body closed under the reader raises it.
            found.extend(getattr(module, attr) for attr in ("HTTPError", "StreamError") if hasattr(module, attr))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


_EPHEMERAL = {"type": "ephemeral"}
_MAX_BREAKPOINTS = 4  # the Messages API's limit per request


def _params(request: LLMRequest) -> dict[str, Any]:
    """The Messages API body, with cache_control breakpoints where the request asks for them."""
    params: dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens,
                              "messages": request.messages}
    if request.tools:
        params["tools"] = request.tools
    if request.system.strip():  # the API refuses a blank system text block
        params["system"] = _system_blocks(request.system, request.system_split) if request.cache else request.system
    if request.cache and request.cache_messages:
        used = len(params["system"]) if "system" in params else 0
        params["messages"] = _marked(request.messages, request.cache_messages, _MAX_BREAKPOINTS - used)
    return params


def _system_blocks(system: str, split: int) -> list[dict[str, Any]]:
    parts = [system[:split], system[split:]] if 0 < split < len(system) else [system]
    if any(not part.strip() for part in parts):  # the API refuses blank text blocks
        parts = [system]
    return [{"type": "text", "text": part, "cache_control": _EPHEMERAL} for part in parts]


def _marked(messages: list[dict[str, Any]], indices: tuple[int, ...], allowed: int) -> list[dict[str, Any]]:
    """A copy of `messages` with a breakpoint on the last block of each indexed message."""
    marked = list(messages)
    positions = sorted({i % len(messages) for i in indices if -len(messages) <= i < len(messages)})
    for position in positions[-allowed:] if allowed > 0 else []:
        message = marked[position]
        content = message.get("content")
        if isinstance(content, str):
            if not content:
                continue
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}]
        elif isinstance(content, list) and content:
            blocks = list(content)
        else:
            continue
        if blocks[-1].get("type") in ("thinking", "redacted_thinking"):
            continue  # a breakpoint cannot sit on a thinking block
        blocks[-1] = {**blocks[-1], "cache_control": _EPHEMERAL}
        marked[position] = {**message, "content": blocks}
    return marked


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.billed: LLMResponse | None = None


class _NotStreamed(Exception):
    """The server answered a streaming request with something that is not an event stream."""


class _CacheRejected(Exception):
    """The server refused a request because of its cache_control marks."""


_NAMES_STREAMING = re.compile(r"\bstream(ing)?\b", re.I)


def _raise_if_unsupported(text: str, params: dict[str, Any], *, streamed: bool) -> None:
    """A 400/422 that names a feature we sent: the caller turns the feature off and asks again."""
    if "cache_control" in text and '"cache_control"' in json.dumps([params.get("system"), params["messages"]]):
        raise _CacheRejected(text)
    if streamed and _NAMES_STREAMING.search(text):
        raise _NotStreamed()


# Error types the API sends as an `error` event inside a 200 stream that are worth a retry.
_RETRYABLE_EVENT_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


def _is_overload_event(exc: anthropic.APIStatusError) -> bool:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    return isinstance(error, dict) and error.get("type") in _RETRYABLE_EVENT_ERRORS


def _usage_only(message: Any) -> LLMResponse | None:
    """The usage a message_start reported, as a response with no content."""
    try:
        response = _response(message)
    except (AttributeError, TypeError, KeyError, ValueError):
        return None
    return LLMResponse(text="", content=[], input_tokens=response.input_tokens,
                       output_tokens=response.output_tokens, model=response.model,
                       cache_creation_input_tokens=response.cache_creation_input_tokens,
                       cache_read_input_tokens=response.cache_read_input_tokens)


def _retry_after(headers: Any) -> float | None:
    """Seconds from retry-after-ms or retry-after (seconds); None when absent or unreadable."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name) if headers is not None else None
        if raw is None:
            continue
        try:
            return float(raw) * scale
        except ValueError:
            continue
    return None


def _count(value: Any) -> int:
    """A usage figure; proxies send null or leave it out."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _response(message: Any) -> LLMResponse:
    blocks = message.content
    if not isinstance(blocks, list):
        raise TypeError("content is not a list")
    content, calls = _normalise_blocks(blocks)
    text = "".join(b["text"] for b in content if b["type"] == "text")
    usage = getattr(message, "usage", None)
    stop = getattr(message, "stop_reason", None)
    return LLMResponse(
        text=text, content=content, tool_calls=calls, stop_reason=stop if isinstance(stop, str) else None,
        input_tokens=_count(getattr(usage, "input_tokens", 0)),
        output_tokens=_count(getattr(usage, "output_tokens", 0)),
        cache_creation_input_tokens=_count(getattr(usage, "cache_creation_input_tokens", 0)),
        cache_read_input_tokens=_count(getattr(usage, "cache_read_input_tokens", 0)),
        model=str(getattr(message, "model", "") or ""),
    )


def _normalise_blocks(blocks: list[Any]) -> tuple[list[dict[str, Any]], tuple[ToolCall, ...]]:
    """Plain dicts with only the fields we send back; the model's raw tool input goes to the tool.

    The SDK does not validate tool input, so it may be a string or a list: the tool reports
    that as an error, and the block replayed to the API carries an empty object instead.
    """
    content: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            content.append({"type": "text", "text": _safe(block.text)})
        elif kind == "tool_use":
            # A lone surrogate ("\ud800" escape) would make the next request unsendable.
            raw = _safe(block.input)
            content.append({"type": "tool_use", "id": block.id, "name": block.name,
                            "input": raw if isinstance(raw, dict) else {}})
            calls.append(ToolCall(block.id, block.name, raw))
        elif kind == "thinking":
            content.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
    return content, tuple(calls)


def _safe(value: Any) -> Any:
    """`value` with every string made storable (lone surrogates replaced), however nested."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable(str(k)): _safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe(v) for v in value]
    return value


def _error_message(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"][:500]
    if isinstance(body, str) and body.lstrip().startswith("<"):
        return "the answer was an HTML page, not the model API"  # a proxy's error page
    return str(exc.message)[:500]


class OfflineClient:
    """Answers without a network so a newcomer can watch the pipeline work (no API key set)."""

    def __init__(self, reply_template: str = "(offline) {text}") -> None:
        self._template = reply_template

    async def __aenter__(self) -> OfflineClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def complete(self, request: LLMRequest, on_text: TextListener | None = None) -> LLMResponse:
        if request.purpose in ("memory", "emergence"):
            text = json.dumps({"should_update": False, "reason": "offline mode: no model configured"})
        elif request.purpose == "summary":
            text = "(offline summary of earlier messages)"
        else:
            text = self._template.format(text=_last_user_text(request.messages))
            if on_text is not None:
                on_text(text)
        return LLMResponse(text=text, content=[{"type": "text", "text": text}], stop_reason="end_turn",
                           model="offline")


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    """What the user wrote last, without the time label the agent puts before it."""
    return without_time(_last_user_content(messages))


def _last_user_content(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        texts = [t for t in texts if not TIME_LABEL.fullmatch(t)]
        if texts:
            return texts[-1]
    return ""
