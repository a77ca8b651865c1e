"""The model port: what a caller asks (LLMRequest), what it gets back (LLMResponse), and the LLMClient protocol."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

CacheTtl = Literal["5m", "1h"]  # the lifetimes cache_control accepts


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
    # cache_ttl: the lifetime of every breakpoint (one for all: the API refuses a 1-hour
    # breakpoint after a 5-minute one).
    cache: bool = True
    system_split: int = 0
    cache_messages: tuple[int, ...] = ()
    cache_ttl: CacheTtl = "5m"
    # "none": the tools are sent (they are part of a cached prefix this request shares) but
    # the model may not call one.
    tool_choice: Literal["auto", "none"] = "auto"


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
