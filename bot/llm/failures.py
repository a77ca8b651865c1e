"""What a failed model call means, whatever the protocol: retry it, give up, or ask without streaming."""

from __future__ import annotations

import asyncio
import importlib
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from bot.core.errors import LLMError
from bot.llm.port import LLMResponse

# Anthropic; OpenAI, vLLM, DeepSeek; llama.cpp ("the request exceeds the available context size").
_PROMPT_TOO_LONG = re.compile(
    r"prompt is too long|context_length_exceeded|maximum context length|exceeds? the available context size"
    r"|exceed_context_size_error", re.I)

# Retried: timeouts, lock timeouts, rate limits, server errors and 529 overloaded.
RETRY_STATUSES = frozenset({408, 409, 429})


def is_prompt_too_long(message: str) -> bool:
    return bool(_PROMPT_TOO_LONG.search(message))


class Retryable(Exception):
    """A failure worth another try; `retry_after` is what the server asked us to wait."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.billed: LLMResponse | None = None


class NotStreamed(Exception):
    """The server answered a streaming request with something that is not an event stream."""


def retry_after(headers: Any) -> float | None:
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


def transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP library's own errors, whichever the installed SDK is built on."""
    found: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
            # StreamError is not an HTTPError: a body closed under the reader raises it.
            found.extend(getattr(module, attr) for attr in ("HTTPError", "StreamError") if hasattr(module, attr))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


@asynccontextmanager
async def whole_answer_within(seconds: float) -> AsyncIterator[None]:
    """A non-streamed call, body included, bounded by `seconds`: a timeout (retried) after that."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        raise Retryable("the model did not answer in time") from None


# The longest a streamed answer may take in all: the SDKs' own limit for one request.
STREAM_DEADLINE_S = 600.0


@asynccontextmanager
async def stream_within(seconds: float) -> AsyncIterator[Callable[[], None]]:
    """A streamed call bounded twice: `seconds` of silence between events (retried, as a stalled
    server is), and STREAM_DEADLINE_S in all (not retried: the user has waited long enough).
    Yields what to call at each event heard."""
    loop = asyncio.get_running_loop()
    gap = asyncio.timeout(seconds)
    try:
        async with asyncio.timeout(max(STREAM_DEADLINE_S, seconds)), gap:
            yield lambda: gap.reschedule(loop.time() + seconds)
    except TimeoutError:
        if gap.expired():
            raise Retryable(f"the model's answer stream went silent for {seconds:g} s") from None
        raise LLMError("the model's answer took too long") from None


def no_events(headers: Any) -> Exception:
    """What a stream that ended with no event means: a plain body is a server that does not
    stream; an event stream with nothing in it is a broken answer, asked again."""
    if "text/event-stream" not in headers.get("content-type", ""):
        return NotStreamed()
    return Retryable("the model's answer stream was empty")
