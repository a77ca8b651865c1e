"""UsageRecordingClient: every model call's billed tokens land in mate_llm_usage."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from bot.core.errors import LLMError
from bot.llm.port import LLMClient, LLMRequest, LLMResponse, TextListener
from bot.storage.usage import LlmUsageRecord, LlmUsageRepository

log = logging.getLogger(__name__)


class UsageRecordingClient:
    """Wraps an LLMClient; the row is queued into the next group commit, never awaited by
    the reply, and a failed write costs a log line, not the answer."""

    def __init__(self, inner: LLMClient, usage: LlmUsageRepository) -> None:
        self._inner = inner
        self._usage = usage
        self._failed_once = False

    @property
    def inner(self) -> LLMClient:
        return self._inner

    async def complete(self, request: LLMRequest, on_text: TextListener | None = None) -> LLMResponse:
        try:
            response = await self._inner.complete(request, on_text)
        except LLMError as exc:
            # A stream that broke off half-way was billed for what it sent.
            if isinstance(exc.billed, LLMResponse):
                self._record(request, exc.billed)
            raise
        self._record(request, response)
        return response

    def _record(self, request: LLMRequest, response: LLMResponse) -> None:
        try:
            pending = self._usage.queue(LlmUsageRecord(
                purpose=request.purpose, model=response.model or request.model,
                input_tokens=response.input_tokens,
                cache_creation_input_tokens=response.cache_creation_input_tokens,
                cache_read_input_tokens=response.cache_read_input_tokens,
                output_tokens=response.output_tokens,
                agent_id=request.agent_id, conversation_id=request.conversation_id,
            ))
        except Exception as exc:  # the database is closing: the answer matters more than the row
            self._report(exc)
        else:
            pending.add_done_callback(self._written)

    def _written(self, done: asyncio.Future[list[Any]]) -> None:
        if done.cancelled():
            return
        if done.exception() is not None:
            self._report(done.exception())
        elif self._failed_once:
            log.info("token usage is being recorded again")
            self._failed_once = False

    def _report(self, exc: BaseException | None) -> None:
        # One line per run of failures, not one per call: a full disk would flood the log.
        if not self._failed_once:
            log.warning("could not record token usage: %s", exc)
            self._failed_once = True
