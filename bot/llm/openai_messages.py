"""OpenAI-compatible Chat Completions on the wire: our Messages-shaped request as a chat body, and its answer read back.

Everything above bot/llm speaks in Anthropic-shaped content blocks (text, image, document,
tool_use, tool_result); this module is the only place that knows Chat Completions: the system
prompt becomes a system message, tool results become `tool` messages, images `image_url` data
URLs, and cache_control marks are dropped (caching there is the provider's own). Answers come
back as the same blocks, with the finish reason and usage in Messages terms.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.llm.port import LLMRequest, LLMResponse, ToolCall
from bot.llm.safe_text import safe

# finish_reason -> the Messages API stop_reason the callers know.
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "function_call": "tool_use", "content_filter": "refusal"}


def chat_params(request: LLMRequest, *, max_tokens_key: str = "max_tokens") -> dict[str, Any]:
    """The Chat Completions body for `request` (without `stream`)."""
    messages: list[dict[str, Any]] = []
    if request.system.strip():
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.extend(_chat_messages(message))
    params: dict[str, Any] = {"model": request.model, "messages": messages, max_tokens_key: request.max_tokens}
    if request.tools:
        params["tools"] = [_function(tool) for tool in request.tools]
        if request.tool_choice == "none":
            params["tool_choice"] = "none"
    return params


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool["name"],
                                "parameters": tool.get("input_schema") or {"type": "object", "properties": {}}}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _chat_messages(message: dict[str, Any]) -> list[dict[str, Any]]:
    role = message.get("role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    blocks = [b for b in content or [] if isinstance(b, dict)]
    if role == "assistant":
        return [_assistant(blocks)]
    # A user turn: tool results first (they must follow the assistant's calls), then the rest.
    out = [_tool_message(b) for b in blocks if b.get("type") == "tool_result"]
    parts = [part for b in blocks if b.get("type") != "tool_result" for part in _user_parts(b)]
    if parts:
        if all(part["type"] == "text" for part in parts):  # plain text: every server takes a string
            out.append({"role": "user", "content": "\n".join(part["text"] for part in parts)})
        else:
            out.append({"role": "user", "content": parts})
    return out


def _assistant(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    calls = [{"id": b["id"], "type": "function",
              "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {}, ensure_ascii=False)}}
             for b in blocks if b.get("type") == "tool_use"]
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_message(block: dict[str, Any]) -> dict[str, Any]:
    content = block.get("content")
    if isinstance(content, list):
        content = "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    text = str(content or "")
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": block.get("tool_use_id", ""), "content": text}


def _user_parts(block: dict[str, Any]) -> list[dict[str, Any]]:
    kind = block.get("type")
    if kind == "text":
        return [{"type": "text", "text": block.get("text", "")}]
    source = block.get("source")
    if kind in ("image", "document") and isinstance(source, dict) and source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        if kind == "image":
            return [{"type": "image_url", "image_url": {"url": url}}]
        return [{"type": "file", "file": {"filename": "document.pdf", "file_data": url}}]
    return []  # thinking and anything else this protocol has no place for


def read_completion(completion: Any) -> LLMResponse:
    """A non-streamed ChatCompletion as an LLMResponse; raises on a body that is not one."""
    choices = completion.choices
    if not isinstance(choices, list) or not choices:
        raise ValueError("no choices in the answer")
    choice = choices[0]
    message = choice.message
    raw_calls = [(_optional_text(c.id), _text(c.function.name), _optional_text(c.function.arguments))
                 for c in message.tool_calls or []]
    # The SDK builds answers without validating them: `content` may be anything the server sent.
    content = _optional_text(message.content)
    # An answer cut at max_tokens (or filtered) before its first word is no malformed one.
    if content is None and not raw_calls and choice.finish_reason not in ("length", "content_filter"):
        refusal = getattr(message, "refusal", None)
        if not isinstance(refusal, str) or not refusal:
            raise ValueError("the answer has neither text nor a tool call")
        content = refusal  # OpenAI's refusal comes instead of content
    return build_response(content or "", raw_calls, choice.finish_reason,
                          getattr(completion, "usage", None), str(getattr(completion, "model", "") or ""))


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text in the answer, got {type(value).__name__}")
    return value


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


@dataclass
class StreamedAnswer:
    """A streamed answer put together from its chunks: text, tool-call pieces by index, usage."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, list[str]] = field(default_factory=dict)  # index -> [id, name, arguments]
    finish_reason: str | None = None
    usage: Any = None
    model: str = ""
    chunks: int = 0

    def add(self, chunk: Any) -> str:
        """Takes one chunk in; returns the text it added."""
        self.chunks += 1
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        self.model = str(getattr(chunk, "model", "") or self.model)
        added = ""
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue
            delta = choice.delta
            if delta is not None and delta.content is not None:
                # A lone surrogate ("\ud800" escape) could not be shown, sent or stored.
                added += safe(_text(delta.content))
            for piece in (delta.tool_calls if delta is not None else None) or []:
                index = piece.index if isinstance(piece.index, int) else len(self.calls)
                call = self.calls.setdefault(index, ["", "", ""])
                if piece.id:
                    call[0] = _text(piece.id)
                function = piece.function
                if function is not None:
                    if function.name:
                        call[1] += _text(function.name)
                    if function.arguments:
                        call[2] += _text(function.arguments)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        if added:
            self.text.append(added)
        return added

    def response(self) -> LLMResponse:
        calls = [(c[0], c[1], c[2]) for _, c in sorted(self.calls.items())]
        return build_response("".join(self.text), calls, self.finish_reason, self.usage, self.model)


def build_response(text: str, raw_calls: Sequence[tuple[str | None, str, str | None]], finish_reason: str | None,
                   usage: Any, model: str) -> LLMResponse:
    text = safe(text)
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    calls: list[ToolCall] = []
    for call_id, name, arguments in raw_calls:
        raw = _arguments(arguments)
        # Some servers leave the id out; a history must never hold one id twice.
        identifier = call_id or f"call_{uuid.uuid4().hex[:24]}"
        content.append({"type": "tool_use", "id": identifier, "name": name,
                        "input": raw if isinstance(raw, dict) else {}})
        calls.append(ToolCall(identifier, name, raw))
    stop = STOP_REASONS.get(finish_reason or "", "end_turn")
    if calls and stop == "end_turn":  # llama.cpp and others say "stop" after a tool call
        stop = "tool_use"
    prompt, cached = _usage(usage)
    return LLMResponse(text=text, content=content, tool_calls=tuple(calls), stop_reason=stop,
                       input_tokens=prompt - cached, output_tokens=_count(getattr(usage, "completion_tokens", 0)),
                       cache_read_input_tokens=cached, model=model)


def _arguments(arguments: str | None) -> Any:
    """The call's arguments: the object the model wrote; its raw text when that is not JSON
    (the tool answers that it is not an object)."""
    if not arguments or not arguments.strip():
        return {}
    try:
        return safe(json.loads(arguments))
    except ValueError:
        return safe(arguments)


def _usage(usage: Any) -> tuple[int, int]:
    """(prompt tokens, of which read from the provider's cache)."""
    if usage is None:
        return 0, 0
    prompt = _count(getattr(usage, "prompt_tokens", 0))
    details = getattr(usage, "prompt_tokens_details", None)
    cached = _count(getattr(details, "cached_tokens", 0))
    extra = getattr(usage, "model_extra", None) or {}
    if not cached and isinstance(extra, dict):  # DeepSeek names its cache hits so
        cached = _count(extra.get("prompt_cache_hit_tokens", 0))
    return prompt, min(cached, prompt)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def error_text(body: Any, fallback: str) -> str:
    """The error's message from an error body (`{"error": {"message": ...}}`, or a page)."""
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str):
            return message[:500]
    if isinstance(body, str) and body.lstrip().startswith("<"):
        return "the answer was an HTML page, not the model API"  # a proxy's error page
    return fallback[:500]


def error_kind(body: Any) -> str:
    """The error's `code` or `type` ("context_length_exceeded", "exceed_context_size_error")."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ""
    return " ".join(str(error.get(key) or "") for key in ("code", "type")).strip()
