"""The Anthropic Messages API on the wire: request bodies with cache_control breakpoints, answers and errors read back."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from bot.llm.failures import NotStreamed
from bot.llm.port import CacheTtl, LLMRequest, LLMResponse, ToolCall
from bot.llm.safe_text import safe

if TYPE_CHECKING:
    import anthropic

_MAX_BREAKPOINTS = 4  # the Messages API's limit per request


def _control(ttl: CacheTtl) -> dict[str, str]:
    # The 5-minute lifetime is the API's default: sent without `ttl`, as servers that predate
    # the 1-hour cache (proxies, local servers) expect it.
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def request_params(request: LLMRequest) -> dict[str, Any]:
    """The Messages API body, with cache_control breakpoints where the request asks for them."""
    params: dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens,
                              "messages": request.messages}
    if request.tools:
        params["tools"] = request.tools
        if request.tool_choice == "none":
            params["tool_choice"] = {"type": "none"}
    control = _control(request.cache_ttl)
    if request.system.strip():  # the API refuses a blank system text block
        params["system"] = (_system_blocks(request.system, request.system_split, control)
                            if request.cache else request.system)
    if request.cache and request.cache_messages:
        used = len(params["system"]) if "system" in params else 0
        params["messages"] = _marked(request.messages, request.cache_messages, _MAX_BREAKPOINTS - used, control)
    return params


def _system_blocks(system: str, split: int, control: dict[str, str]) -> list[dict[str, Any]]:
    parts = [system[:split], system[split:]] if 0 < split < len(system) else [system]
    if any(not part.strip() for part in parts):  # the API refuses blank text blocks
        parts = [system]
    return [{"type": "text", "text": part, "cache_control": control} for part in parts]


def _marked(messages: list[dict[str, Any]], indices: tuple[int, ...], allowed: int,
            control: dict[str, str]) -> list[dict[str, Any]]:
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
        blocks[-1] = {**blocks[-1], "cache_control": control}
        marked[position] = {**message, "content": blocks}
    return marked


class CacheRejected(Exception):
    """The server refused a request because of its cache_control marks."""


_NAMES_STREAMING = re.compile(r"\bstream(ing)?\b", re.I)


def raise_if_unsupported(text: str, params: dict[str, Any], *, streamed: bool) -> None:
    """A 400/422 that names a feature we sent: the caller turns the feature off and asks again."""
    if "cache_control" in text and '"cache_control"' in json.dumps([params.get("system"), params["messages"]]):
        raise CacheRejected(text)
    if streamed and _NAMES_STREAMING.search(text):
        raise NotStreamed()


# Error types the API sends as an `error` event inside a 200 stream that are worth a retry.
_RETRYABLE_EVENT_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


def is_overload_event(exc: anthropic.APIStatusError) -> bool:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    return isinstance(error, dict) and error.get("type") in _RETRYABLE_EVENT_ERRORS


def error_message(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        if isinstance(message, str):
            return message[:500]
    if isinstance(body, str) and body.lstrip().startswith("<"):
        return "the answer was an HTML page, not the model API"  # a proxy's error page
    return str(exc.message)[:500]


def usage_only(message: Any) -> LLMResponse | None:
    """The usage a message_start reported, as a response with no content."""
    try:
        response = read_response(message)
    except (AttributeError, TypeError, KeyError, ValueError):
        return None
    return LLMResponse(text="", content=[], input_tokens=response.input_tokens,
                       output_tokens=response.output_tokens, model=response.model,
                       cache_creation_input_tokens=response.cache_creation_input_tokens,
                       cache_read_input_tokens=response.cache_read_input_tokens)


def _count(value: Any) -> int:
    """A usage figure; proxies send null or leave it out."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def read_response(message: Any) -> LLMResponse:
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


def text_of(value: Any) -> str:
    """`value`, which the answer must hold as text; TypeError (a malformed answer) otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"expected text in the answer, got {type(value).__name__}")
    return value


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
            # The SDK does not validate answers: a `text` that is a number or an object is malformed.
            content.append({"type": "text", "text": safe(text_of(block.text))})
        elif kind == "tool_use":
            call_id, name = text_of(block.id), text_of(block.name)
            # A lone surrogate ("\ud800" escape) would make the next request unsendable.
            raw = safe(block.input)
            content.append({"type": "tool_use", "id": call_id, "name": name,
                            "input": raw if isinstance(raw, dict) else {}})
            calls.append(ToolCall(call_id, name, raw))
        elif kind == "thinking":
            content.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
    return content, tuple(calls)
