"""`mate.llm`: the model, its protocol and how it is called."""

from __future__ import annotations

import ipaddress
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    model_validator,
)

from bot.core.config.base import Section, whole_number


DEFAULT_MODEL = "claude-sonnet-5-5"
# At or below this much context (tokens) `tools: auto` offers the compact schemas: the full
# ones were 61 % of a small local model's first prompt (SPEC S34).
COMPACT_TOOLS_CONTEXT = 16384


LlmApi = Literal["anthropic", "openai"]


class LlmConfig(Section):
    provider: Literal["auto", "anthropic", "offline"] = "auto"
    # The protocol: the Anthropic Messages API or OpenAI-compatible Chat Completions; `auto`
    # is resolved when the file is read (openai when only OPENAI_API_KEY is set), see resolve_api;
    # with neither key in the environment it stays `auto` and speaks anthropic.
    api: Literal["auto", "anthropic", "openai"] = "anthropic"
    model: str = DEFAULT_MODEL
    memory_model: str | None = None
    api_key: str = ""
    base_url: str = ""
    max_output_tokens: int = Field(2048, ge=1, le=128000)
    timeout_seconds: float = Field(120, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    max_concurrency: int = Field(32, ge=1, le=1000)
    # The model server's parallel slots (llama.cpp: its -np): chat and memory share them, a
    # waiting chat turn before any memory call. None: max-concurrency.
    slots: int | None = Field(None, ge=1, le=1000)
    stream: bool = True
    # A reply that is only a JSON tool call written as text runs as that call (small local
    # models do not emit native tool calls); auto = on when base_url points elsewhere.
    text_tool_calls: Literal["auto", "on", "off"] = "auto"
    # Prompt caching: auto = the 1-hour cache while a conversation is active (a turn within the
    # hour), the 5-minute one otherwise; 5m / 1h always that lifetime; off = no cache_control.
    cache: Literal["auto", "5m", "1h", "off"] = "auto"
    # Tool schemas as the model reads them: full (descriptions, examples) or compact (one line
    # per tool, bare parameters); auto = compact when the context (probed from a local server,
    # else the configured window) is at most COMPACT_TOOLS_CONTEXT tokens.
    tools: Literal["full", "compact", "auto"] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _slots_bound_concurrency(cls, data: Any) -> Any:
        """No more calls are in flight than the server has slots: max-concurrency becomes the smaller
        of the two, so the one limit every client applies is the right one."""
        if not isinstance(data, dict):
            return data
        slots = whole_number(data.get("slots"))
        if slots is None or not 1 <= slots <= 1000:
            return data  # unset, or the field's own check reports it
        key = "max_concurrency" if "max_concurrency" in data else "max-concurrency"
        limit = whole_number(data.get(key, cls.model_fields["max_concurrency"].default))
        if limit is not None and limit > slots:
            data = {**data, key: slots}
        return data

    @model_validator(mode="after")
    def _key_for_anthropic(self) -> LlmConfig:
        if self.provider == "anthropic" and not self.api_key.strip():
            raise ValueError(f"api-key: required when provider is anthropic (set {' or '.join(self.key_variables)})")
        return self

    @property
    def protocol(self) -> LlmApi:
        """The protocol spoken to the model; `auto` left unresolved (no environment) means anthropic."""
        return "openai" if self.api == "openai" else "anthropic"

    @property
    def key_variables(self) -> tuple[str, ...]:
        """The environment variables this protocol's key is read from: both while `auto` is unresolved."""
        if self.api == "auto":
            return ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")
        return ("OPENAI_API_KEY",) if self.api == "openai" else ("ANTHROPIC_API_KEY",)

    @property
    def call_slots(self) -> int:
        """Model calls in flight at once (slots, when set, already bounds max-concurrency)."""
        return self.max_concurrency

    def tool_form(self, context_tokens: int) -> Literal["full", "compact"]:
        """The form tools are offered in, for a model that holds `context_tokens`."""
        if self.tools == "auto":
            return "compact" if context_tokens <= COMPACT_TOOLS_CONTEXT else "full"
        return self.tools

    @property
    def effective_memory_model(self) -> str:
        return self.memory_model or self.model

    @property
    def uses_anthropic(self) -> bool:
        """A model is used (whichever protocol); False: the offline client answers."""
        if self.provider == "auto":  # a local server (base-url) needs no key
            return bool(self.api_key or self.base_url.strip())
        return self.provider == "anthropic"

    @property
    def reaches_anthropic(self) -> bool:
        """Anthropic's own Messages API: no `base-url`, or one on anthropic.com."""
        if self.protocol != "anthropic":
            return False
        if not self.base_url.strip():
            return True
        try:
            host = (urlsplit(self.base_url.strip()).hostname or "").lower()
        except ValueError:
            return False
        return host == "anthropic.com" or host.endswith(".anthropic.com")

    @property
    def local_server(self) -> bool:
        """`base-url` names this machine or the local network (loopback, private or link-local
        addresses, localhost, a name without a dot or under .local / .lan / .internal)."""
        try:
            host = (urlsplit(self.base_url.strip()).hostname or "").lower()
        except ValueError:
            return False
        if not host:
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return host == "localhost" or "." not in host or host.endswith((".local", ".lan", ".internal"))
        return address.is_loopback or address.is_private or address.is_link_local

    @property
    def hosted_messages_api(self) -> bool:
        """The Messages API of a hosted service (Anthropic's, or a gateway in front of it): cache
        entries live as long as a request asks, and every token is billed."""
        return self.protocol == "anthropic" and not self.local_server

    @property
    def parses_text_tool_calls(self) -> bool:
        if self.text_tool_calls == "auto":
            return bool(self.base_url.strip())
        return self.text_tool_calls == "on"
