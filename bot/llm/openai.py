"""OpenAIClient: the LLMClient over OpenAI-compatible Chat Completions (the openai SDK), with our retries and streaming.

OpenAI, OpenRouter, DeepSeek, Ollama's /v1, llama.cpp, vLLM and LM Studio all serve it at
`<base-url>/chat/completions`. Failures mean what they mean for the Anthropic client:
429/5xx/timeouts are retried (retry-after honoured), a context-length error is PromptTooLong
(the window compacts and asks again), anything else is an LLMError (the apology).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
import re
from typing import TYPE_CHECKING, Any

from bot.core.config import LlmConfig
from bot.core.errors import LLMError, PromptTooLong, RequestRejected
from bot.core.lifecycle import AsyncResource
from bot.llm.attempts import AskAgain, CallPolicy, answer_with_retries
from bot.llm.failures import (
    RETRY_STATUSES,
    NotStreamed,
    Retryable,
    is_prompt_too_long,
    no_events,
    retry_after,
    stream_within,
    transport_errors,
    whole_answer_within,
)
from bot.llm.openai_messages import StreamedAnswer, chat_params, error_kind, error_text, read_completion
from bot.llm.port import LLMRequest, LLMResponse, TextListener

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)

_NAMES_STREAMING = re.compile(r"\bstream(ing)?\b", re.I)


class _Unsupported(Exception):
    """The server refused a parameter we can do without or name differently; `what` says which."""

    def __init__(self, what: str, text: str) -> None:
        super().__init__(text)
        self.what = what


class OpenAIClient(AsyncResource):
    """LLMClient over openai.AsyncOpenAI; the retry policy is ours, as in AnthropicClient."""

    def __init__(self, config: LlmConfig, *, sdk: openai.AsyncOpenAI | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        import openai  # imported here: offline mode and the Anthropic protocol need not pay for it
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        self._errors = openai
        # What `chat.completions.create` reads answers as, for our own post (see _post).
        self._answer_type = ChatCompletion
        self._chunk_stream = openai.AsyncStream[ChatCompletionChunk]
        self._transport_errors = transport_errors()
        options: dict[str, Any] = {"max_retries": 0, "timeout": config.timeout_seconds,
                                   # local servers ignore the key, but the SDK insists on one
                                   "api_key": config.api_key or "local"}
        if config.base_url.strip():
            options["base_url"] = api_root(config.base_url.strip())
        self._sdk = sdk or openai.AsyncOpenAI(**options)
        self._policy = CallPolicy.of(config, clock)
        self._timeout = config.timeout_seconds
        self._redact = self._policy.redact
        # Turned off (or renamed) for good when the server refuses them.
        self._stream_usage = True  # stream_options.include_usage
        self._max_tokens_key = "max_tokens"

    async def close(self) -> None:
        await self._sdk.close()

    async def complete(self, request: LLMRequest, on_text: TextListener | None = None) -> LLMResponse:
        bounded = request.purpose in ("chat", "summary")

        async def ask(listener: TextListener | None) -> LLMResponse:
            try:
                return await self._once(chat_params(request, max_tokens_key=self._max_tokens_key), listener, bounded)
            except _Unsupported as refused:
                if not self._adapt(refused.what):
                    raise RequestRejected(f"request rejected: {refused}") from None
                raise AskAgain from None

        return await answer_with_retries(ask, on_text, self._policy)

    def _adapt(self, what: str) -> bool:
        """Stop sending what the server refused; False when there is nothing left to change."""
        if what == "max_tokens" and self._max_tokens_key == "max_tokens":
            log.warning("the model API wants max_completion_tokens instead of max_tokens; sending that from now on")
            self._max_tokens_key = "max_completion_tokens"
            return True
        if what == "stream_options" and self._stream_usage:
            log.warning("the model API refuses stream_options; streamed answers come without token usage")
            self._stream_usage = False
            return True
        return False

    async def _once(self, params: dict[str, Any], on_text: TextListener | None, bounded: bool) -> LLMResponse:
        openai = self._errors
        streamed = on_text is not None
        try:
            async with self._policy.slots.held(bounded):
                if on_text is None:
                    # httpx's read timeout restarts with every byte: a server that dribbles its
                    # body would hold the call forever. timeout-seconds bounds the whole answer.
                    async with whole_answer_within(self._timeout):
                        completion = await self._post(params, stream=False)
                else:
                    return await self._streamed(params, on_text)
        except openai.APIStatusError as exc:
            raise self._status_error(exc, params, streamed) from None
        except openai.APITimeoutError:
            raise Retryable("the model did not answer in time") from None
        except openai.APIConnectionError:
            raise Retryable("cannot reach the model API") from None
        except openai.APIError as exc:  # an `error` object inside a 200 event stream
            text = self._redact(error_text(exc.body, str(exc.message)))
            if is_prompt_too_long(f"{text} {error_kind(exc.body)}"):
                raise PromptTooLong(text) from None
            raise Retryable(f"the model API broke off: {text}") from None
        except self._transport_errors:  # the SDK passes a stream's read errors through as they are
            raise Retryable("the connection to the model API broke off") from None
        except ValueError as exc:  # json.JSONDecodeError included: a malformed response body
            raise LLMError(f"malformed response from the model API: {self._redact(str(exc))[:200]}") from None
        try:
            return read_completion(completion)
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            # A 200 that is not a Chat Completions answer: a proxy's HTML page, {"foo": 1}...
            raise LLMError(f"malformed response from the model API: {type(exc).__name__}") from None

    def _status_error(self, exc: openai.APIStatusError, params: dict[str, Any], streamed: bool) -> Exception:
        message = self._redact(error_text(exc.body, str(exc.message)))
        status = exc.status_code
        if status in (400, 413, 422):
            if is_prompt_too_long(f"{message} {error_kind(exc.body)}"):
                return PromptTooLong(message)
            if "max_completion_tokens" in message and "max_tokens" in params:
                return _Unsupported("max_tokens", message)
            if "stream_options" in message and streamed and self._stream_usage:
                return _Unsupported("stream_options", message)
            if streamed and _NAMES_STREAMING.search(message):
                return NotStreamed()
            if status == 400:
                return RequestRejected(f"request rejected: {message}")
        text = f"HTTP {status}: {message}"
        if status in RETRY_STATUSES or status >= 500:
            return Retryable(text, retry_after(exc.response.headers))
        return LLMError(text)

    async def _post(self, body: dict[str, Any], *, stream: bool) -> Any:
        """POST the body chat_params built, as it is. `chat.completions.create` would first walk
        every message of it against the SDK's TypedDicts (`maybe_transform`), which changes
        nothing in a body like ours yet cost most of the daemon's CPU per message, growing with
        the history. The answer is read and errors raised exactly as through `create`."""
        return await self._sdk.post("/chat/completions", body=body, cast_to=self._answer_type,
                                    options={"security": {"bearer_auth": True}}, stream=stream,
                                    stream_cls=self._chunk_stream)

    async def _streamed(self, params: dict[str, Any], on_text: TextListener) -> LLMResponse:
        answer = StreamedAnswer()
        body = {**params, "stream": True}
        if self._stream_usage:
            body["stream_options"] = {"include_usage": True}
        try:
            async with stream_within(self._timeout) as heard:
                stream = await self._post(body, stream=True)
                async with stream:
                    async for chunk in stream:
                        heard()
                        text = answer.add(chunk)
                        if text:
                            on_text(text)
                    if not answer.chunks:
                        raise no_events(stream.response.headers)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            raise LLMError(f"malformed stream from the model API: {type(exc).__name__}") from None
        if answer.finish_reason is None:  # the stream ended before the last chunk
            raise Retryable("the model's answer stopped half-way")
        return answer.response()


def api_root(base_url: str) -> str:
    """What the openai SDK takes: the address as given, with /v1 added when it has no path
    (http://127.0.0.1:8080 is llama-server's root; its API is at /v1)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(base_url.rstrip("/"))
    return urlunsplit(parts._replace(path="/v1")) if not parts.path else base_url.rstrip("/")
