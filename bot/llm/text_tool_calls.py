"""TextToolCallClient: a tool call that a model wrote as JSON text runs as that tool call.

Small local models (Qwen 1.5B under llama.cpp, for one) never emit a native tool_use
block: asked to use a tool they answer with the call as text, `{"name": ..., "arguments":
{...}}`, often in a ```json fence. When the whole reply is such an object naming a tool
the request offered, the response is rewritten into the tool_use block the model meant,
so the agent runs it and the history replays it as a real tool call.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from bot.core.errors import LLMError, StreamBroken
from bot.llm.port import LLMClient, LLMRequest, LLMResponse, TextListener, ToolCall

_FENCE = re.compile(r"^```(?:json)?[ \t]*\n(.*)\n```$", re.S | re.I)
_CALL_KEYS = frozenset({"name", "arguments", "input", "parameters", "type", "id"})
_CALL_TAGS = ("tool_call", "tools", "tool_response", "function_call", "tool")
_TAGGED = re.compile(rf"^<({'|'.join(_CALL_TAGS)})>(.*?)(?:</\1>)?$", re.S)
# Fences a written tool call comes in; any other fence (```python) is an answer.
_CALL_FENCES = frozenset({"```", "```json"})


def text_tool_call(text: str, offered: set[str]) -> tuple[str, dict[str, Any]] | None:
    """(name, input) when `text` as a whole is one JSON tool call naming an offered tool:
    bare, in a ```json fence, or in the tags chat templates teach (<tool_call>...</tool_call>,
    the closing tag sometimes cut off)."""
    body = text.strip()
    tagged = _TAGGED.match(body)
    if tagged:
        body = tagged.group(2).strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body.startswith("{"):
        return None
    try:
        call = json.loads(body)
    except ValueError:
        return None
    if not isinstance(call, dict) or not set(call) <= _CALL_KEYS:
        return None
    name = call.get("name")
    if not isinstance(name, str) or name not in offered:
        return None  # never run a tool that was not offered, whatever the text says
    arguments: Any = next((call[key] for key in ("arguments", "input", "parameters") if key in call), {})
    if isinstance(arguments, str):  # the OpenAI habit: arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return name, arguments


class TextToolCallClient:
    """Wraps an LLMClient; only requests that offer tools the model may call are looked at."""

    def __init__(self, inner: LLMClient) -> None:
        self._inner = inner

    async def complete(self, request: LLMRequest, on_text: TextListener | None = None) -> LLMResponse:
        if not request.tools or request.tool_choice == "none":
            return await self._inner.complete(request, on_text)
        held = _HeldPreview(on_text) if on_text is not None else None
        try:
            response = await self._inner.complete(request, held.text if held else None)
        except StreamBroken as broken:
            if held is not None and not held.passing:  # the user saw nothing: a plain failure
                raise LLMError(str(broken), billed=broken.billed) from None
            raise
        if response.tool_calls:
            return response
        found = text_tool_call(response.text, {str(tool.get("name")) for tool in request.tools})
        if found is None:
            return response
        name, arguments = found
        # Unique for good: a conversation's history must never hold one tool_use id twice.
        call = ToolCall(id=f"toolu_text_{uuid.uuid4().hex[:24]}", name=name, input=arguments)
        block = {"type": "tool_use", "id": call.id, "name": name, "input": arguments}
        return LLMResponse(
            text="", content=[block], tool_calls=(call,), stop_reason="tool_use",
            input_tokens=response.input_tokens, output_tokens=response.output_tokens, model=response.model,
            cache_creation_input_tokens=response.cache_creation_input_tokens,
            cache_read_input_tokens=response.cache_read_input_tokens,
        )


class _HeldPreview:
    """Passes streamed text on, except while it may still turn out to be a tool call:
    the user should not watch JSON appear and vanish."""

    def __init__(self, on_text: TextListener) -> None:
        self._on_text = on_text
        self._held = ""
        self.passing = False  # True once the text is known to be an answer and goes on

    def text(self, delta: str) -> None:
        if self.passing:
            self._on_text(delta)
            return
        self._held += delta
        if self._decided(self._held.lstrip()):
            self.passing = True
            self._on_text(self._held)

    @staticmethod
    def _decided(start: str) -> bool:
        if not start:
            return False
        if start.startswith("`"):  # a fence: a call only if it is ```json or a bare ```
            first, newline, _ = start.partition("\n")
            return bool(newline) and first.strip().lower() not in _CALL_FENCES
        if start.startswith("<"):  # still undecided while it may become one of the call tags
            return not any(f"<{tag}>".startswith(start[: len(tag) + 2]) for tag in _CALL_TAGS)
        return not start.startswith("{")
