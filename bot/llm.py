"""LLM port plus its two implementations: the Anthropic SDK and an offline stand-in."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from bot.config import LlmConfig
from bot.errors import LLMError, PromptTooLong
from bot.redaction import Redactor

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
    purpose: str = "chat"  # chat | summary | memory | emergence: for logs and the offline client


@dataclass(frozen=True, slots=True)
class LLMResponse:
    text: str
    content: list[dict[str, Any]]
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""


class LLMClient(Protocol):
    async def complete(self, request: LLMRequest) -> LLMResponse:
        """One Messages API call; raises PromptTooLong or LLMError."""
        ...


def is_prompt_too_long(message: str) -> bool:
    return bool(_PROMPT_TOO_LONG.search(message))


class AnthropicClient:
    """LLMClient over anthropic.AsyncAnthropic; the SDK does the retrying (429, 5xx, 529)."""

    def __init__(self, config: LlmConfig, *, sdk: anthropic.AsyncAnthropic | None = None) -> None:
        # Imported here: the SDK takes ~1.5 s to import, which offline mode need not pay.
        import anthropic

        self._errors = anthropic
        options: dict[str, Any] = {
            "max_retries": config.max_retries,
            "timeout": config.timeout_seconds,
        }
        if config.api_key:
            options["api_key"] = config.api_key
        if config.base_url:
            options["base_url"] = config.base_url
        self._sdk = sdk or anthropic.AsyncAnthropic(**options)
        self._limit = asyncio.Semaphore(config.max_concurrency)
        # Upstream error texts end up in logs, replies and run records; a proxy may echo the key.
        self._redact = Redactor([config.api_key])

    async def __aenter__(self) -> AnthropicClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._sdk.close()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": request.messages,
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = request.tools
        anthropic = self._errors
        try:
            async with self._limit:
                message = await self._sdk.messages.create(**params)
        except anthropic.BadRequestError as exc:
            text = self._redact(_error_message(exc))
            if is_prompt_too_long(text):
                raise PromptTooLong(text) from None
            raise LLMError(f"request rejected: {text}") from None
        except anthropic.APIStatusError as exc:
            raise LLMError(f"HTTP {exc.status_code}: {self._redact(_error_message(exc))}") from None
        except anthropic.APITimeoutError:
            raise LLMError("the model did not answer in time") from None
        except anthropic.APIConnectionError:
            raise LLMError("cannot reach the model API") from None
        except ValueError as exc:  # json.JSONDecodeError included: a malformed response body
            raise LLMError(f"malformed response from the model API: {self._redact(str(exc))}") from None
        content, calls = _normalise_blocks(message.content)
        text = "".join(b["text"] for b in content if b["type"] == "text")
        usage = message.usage
        return LLMResponse(
            text=text, content=content, tool_calls=calls, stop_reason=message.stop_reason,
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0, model=message.model,
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
            content.append({"type": "text", "text": block.text})
        elif kind == "tool_use":
            raw = block.input
            content.append({"type": "tool_use", "id": block.id, "name": block.name,
                            "input": raw if isinstance(raw, dict) else {}})
            calls.append(ToolCall(block.id, block.name, raw))
        elif kind == "thinking":
            content.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
    return content, tuple(calls)


def _error_message(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
    return str(exc.message)


class OfflineClient:
    """Answers without a network so a newcomer can watch the pipeline work (no API key set)."""

    def __init__(self, reply_template: str = "(offline) {text}") -> None:
        self._template = reply_template

    async def __aenter__(self) -> OfflineClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if request.purpose in ("memory", "emergence"):
            text = json.dumps({"should_update": False, "reason": "offline mode: no model configured"})
        elif request.purpose == "summary":
            text = "(offline summary of earlier messages)"
        else:
            text = self._template.format(text=_last_user_text(request.messages))
        return LLMResponse(text=text, content=[{"type": "text", "text": text}], stop_reason="end_turn",
                           model="offline")


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        if texts:
            return texts[-1]
    return ""
