"""AnthropicClient: the LLMClient over the anthropic SDK, with our retries, streaming and prompt caching."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bot.core.config import LlmConfig
from bot.core.errors import LLMError, PromptTooLong, RequestRejected
from bot.core.lifecycle import AsyncResource
from bot.llm.anthropic_messages import (
    CacheRejected,
    error_message,
    is_overload_event,
    raise_if_unsupported,
    read_response,
    request_params,
    text_of,
    usage_only,
)
from bot.llm.attempts import AskAgain, CallPolicy, answer_with_retries
from bot.llm.slots import CallSlots
from bot.llm.failures import (
    RETRY_STATUSES,
    Retryable,
    is_prompt_too_long,
    no_events,
    retry_after,
    stream_within,
    transport_errors,
    whole_answer_within,
)
from bot.llm.port import LLMRequest, LLMResponse, TextListener
from bot.llm.safe_text import safe

if TYPE_CHECKING:
    import anthropic

log = logging.getLogger(__name__)


class AnthropicClient(AsyncResource):
    """LLMClient over anthropic.AsyncAnthropic; the retry policy is ours (bot/llm/attempts.py)."""

    def __init__(self, config: LlmConfig, *, sdk: anthropic.AsyncAnthropic | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # Imported here: the SDK takes ~1.5 s to import, which offline mode need not pay.
        import anthropic

        self._errors = anthropic
        self._transport_errors = transport_errors()
        # The SDK would wait out any retry-after, even an hour: it does not retry, we do.
        options: dict[str, Any] = {"max_retries": 0, "timeout": config.timeout_seconds}
        if config.api_key:
            options["api_key"] = config.api_key
        elif config.base_url:  # local servers ignore the key, but the SDK insists on one
            options["api_key"] = "local"
        if config.base_url:
            options["base_url"] = config.base_url
        self._sdk = sdk or anthropic.AsyncAnthropic(**options)
        self._policy = CallPolicy.of(config, clock)
        self._timeout = config.timeout_seconds
        self._redact = self._policy.redact
        # Caching: off for good when the server shows it cannot do it (local servers, proxies).
        self._caching = config.cache != "off"
        self._long_cache = True  # the 1-hour lifetime (`ttl`), which servers that cache may still not know

    @property
    def slots(self) -> CallSlots:
        """The model's call slots: how many calls wait for one, chat and memory."""
        return self._policy.slots

    async def close(self) -> None:
        await self._sdk.close()

    async def complete(self, request: LLMRequest, on_text: TextListener | None = None) -> LLMResponse:
        uncached = not (self._caching and request.cache)
        if not self._long_cache:
            request = replace(request, cache_ttl="5m")
        # Someone waits for a chat answer (or the summary it needs); memory work in the
        # background may wait for a slot as long as it takes rather than fail and be retried.
        bounded = request.purpose in ("chat", "summary")
        params = request_params(request if not uncached else replace(request, cache=False))

        async def ask(listener: TextListener | None) -> LLMResponse:
            nonlocal request, params, uncached
            try:
                return await self._once(params, listener, bounded)
            except CacheRejected as rejected:
                if uncached:  # asked without cache_control already: the error is about something else
                    raise RequestRejected(f"request rejected: {rejected}") from None
                if request.cache_ttl != "5m" and self._long_cache:
                    log.warning("the model API refuses the 1-hour prompt cache; using the 5-minute one from now on")
                    self._long_cache = False
                    request = replace(request, cache_ttl="5m")
                    params = request_params(request)
                    raise AskAgain from None
                if self._caching:
                    log.warning("the model API refuses prompt caching (cache_control); sending requests without it")
                self._caching = False
                params, uncached = request_params(replace(request, cache=False)), True
                raise AskAgain from None

        return await answer_with_retries(ask, on_text, self._policy)

    async def _once(self, params: dict[str, Any], on_text: TextListener | None, bounded: bool) -> LLMResponse:
        started: list[Any] = []  # the streamed message_start: what a broken answer was billed
        try:
            return await self._mapped(params, on_text, started, bounded)
        except (Retryable, LLMError) as exc:
            if started and exc.billed is None:
                exc.billed = usage_only(started[0])
            raise

    async def _mapped(self, params: dict[str, Any], on_text: TextListener | None, started: list[Any],
                      bounded: bool) -> LLMResponse:
        anthropic = self._errors
        try:
            async with self._policy.slots.held(bounded):
                if on_text is None:
                    # httpx's read timeout restarts with every byte: a server that dribbles its
                    # body would hold the call forever. timeout-seconds bounds the whole answer.
                    async with whole_answer_within(self._timeout):
                        message = await self._sdk.messages.create(**params)
                else:
                    message = await self._streamed(params, on_text, started)
        except anthropic.BadRequestError as exc:
            text = self._redact(error_message(exc))
            if is_prompt_too_long(text):
                raise PromptTooLong(text) from None
            raise_if_unsupported(text, params, streamed=on_text is not None)
            raise RequestRejected(f"request rejected: {text}") from None
        except anthropic.APIStatusError as exc:
            text = f"HTTP {exc.status_code}: {self._redact(error_message(exc))}"
            if exc.status_code == 422:  # vLLM and other pydantic servers refuse unknown fields so
                raise_if_unsupported(text, params, streamed=on_text is not None)
            if exc.status_code in RETRY_STATUSES or exc.status_code >= 500 or is_overload_event(exc):
                raise Retryable(text, retry_after(exc.response.headers)) from None
            raise LLMError(text) from None
        except anthropic.APITimeoutError:
            raise Retryable("the model did not answer in time") from None
        except anthropic.APIConnectionError:
            raise Retryable("cannot reach the model API") from None
        except self._transport_errors:  # the SDK passes a stream's read errors through as they are
            raise Retryable("the connection to the model API broke off") from None
        except ValueError as exc:  # json.JSONDecodeError included: a malformed response body
            raise LLMError(f"malformed response from the model API: {self._redact(str(exc))[:200]}") from None
        try:
            return read_response(message)
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            # A 200 that is not a Messages API answer: a proxy's HTML page, {"foo": 1}...
            raise LLMError(f"malformed response from the model API: {type(exc).__name__}") from None

    async def _streamed(self, params: dict[str, Any], on_text: TextListener, started: list[Any]) -> Any:
        # The SDK drops pings before we see them, but they restart its read timeout: a
        # server that sends only pings would hold this call (and its slot) until the
        # whole-answer deadline. So the gap between the events we do see is bounded too.
        try:
            async with stream_within(self._timeout) as heard, self._sdk.messages.stream(**params) as stream:
                async for event in stream:
                    heard()
                    if event.type == "message_start":
                        started.append(event.message)
                    elif event.type == "content_block_start" and event.content_block.type == "text":
                        text_of(event.content_block.text)  # the SDK adds the deltas to it
                    elif event.type == "text" and event.text:
                        on_text(safe(text_of(event.text)))
                if not started:
                    raise no_events(stream.response.headers)
                message = await stream.get_final_message()
        except (RuntimeError, IndexError, AttributeError, TypeError, KeyError) as exc:
            # The SDK's event accumulation trips over events out of order or malformed.
            raise LLMError(f"malformed stream from the model API: {type(exc).__name__}") from None
        if getattr(message, "stop_reason", None) is None:  # the stream ended before message_delta
            raise Retryable("the model's answer stopped half-way")
        return message
