"""One model answer over as many attempts as the retry policy allows: the loop both protocols share.

Each client asks once (`ask`) and maps its SDK's failures to Retryable, NotStreamed, LLMError,
or AskAgain when it changed what it sends after a refusal it can work around (a server without
the 1-hour cache, one that wants `max_completion_tokens`). What the user already saw is never
followed by a second answer: a failure after the first shown text ends as StreamBroken.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from bot.core.config import LlmConfig
from bot.core.errors import LLMError, StreamBroken
from bot.core.redaction import Redactor
from bot.core.retry import MODEL_API
from bot.llm.failures import NotStreamed, Retryable
from bot.llm.port import LLMResponse, TextListener
from bot.llm.slots import CallSlots
from bot.core.retry import Backoff

log = logging.getLogger(__name__)


class AskAgain(Exception):
    """The client adapted its request to what the server refused: ask again at once."""


class StreamingSwitch:
    """Whether answers are asked for as a stream.

    One answer that is not a stream (a proxy's page, plain text, an empty body) is asked again
    without streaming for that request only: a flaky proxy must not cost streaming for good.
    After FAILURES_ALLOWED in a row the switch is off for OFF_FOR_S, then streaming is tried
    again; a streamed answer that arrives clears the count.
    """

    FAILURES_ALLOWED = 3
    OFF_FOR_S = 600.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock  # monotonic seconds; tests move it on instead of waiting 10 minutes
        self._failures = 0
        self._off_until: float | None = None

    @property
    def on(self) -> bool:
        if self._off_until is None:
            return True
        if self._clock() < self._off_until:
            return False
        self._off_until, self._failures = None, 0
        log.warning("trying streamed answers from the model API again")
        return True

    def failed(self) -> None:
        """A streaming request was answered with something that is not a stream."""
        self._failures += 1
        if self._failures >= self.FAILURES_ALLOWED and self._off_until is None:
            self._failures = 0
            self._off_until = self._clock() + self.OFF_FOR_S
            log.warning("the model API does not stream answers (%d in a row); asking without streaming for %.0f "
                        "minutes", self.FAILURES_ALLOWED, self.OFF_FOR_S / 60)

    def succeeded(self) -> None:
        self._failures = 0


@dataclass(frozen=True, slots=True)
class CallPolicy:
    """What both protocols' clients apply to every call, from `mate.llm`."""

    timeout: float
    retry: Backoff
    slots: CallSlots
    redact: Redactor  # upstream error texts end up in logs, replies and run records; a proxy may echo the key
    streaming: StreamingSwitch

    @classmethod
    def of(cls, config: LlmConfig, clock: Callable[[], float] = time.monotonic) -> CallPolicy:
        return cls(
            timeout=config.timeout_seconds,
            # A retry-after longer than timeout-seconds is not waited out: the user gets the
            # apology now instead of an hour of "typing...".
            retry=replace(MODEL_API, attempts=config.max_retries + 1, longest_wait=config.timeout_seconds),
            slots=CallSlots(config.max_concurrency, config.timeout_seconds),
            redact=Redactor([config.api_key]),
            streaming=StreamingSwitch(clock),
        )


async def answer_with_retries(
    ask: Callable[[TextListener | None], Awaitable[LLMResponse]], on_text: TextListener | None, calls: CallPolicy,
) -> LLMResponse:
    policy, streaming = calls.retry, calls.streaming
    shown: list[str] = []

    def listen(text: str) -> None:
        shown.append(text)
        assert on_text is not None
        on_text(text)

    attempt = 0
    stream = on_text is not None and streaming.on
    while True:
        try:
            response = await ask(listen if stream else None)
            if stream:
                streaming.succeeded()
            return response
        except NotStreamed:
            # A proxy or local server that answers `stream: true` with a plain body or refuses it:
            # this request is asked again whole, at once; the switch decides about the next ones.
            log.info("the model API's answer to a streaming request was not a stream; asking again without")
            stream = False
            streaming.failed()
        except AskAgain:
            continue
        except Retryable as retry:
            if shown:  # the user saw part of an answer: a second one would not follow on
                raise StreamBroken(retry.message, "".join(shown), billed=retry.billed) from None
            delay = policy.wait(attempt, retry.retry_after)
            if delay is None:
                if retry.retry_after is not None and policy.allows(attempt):
                    retry.message += f" (asked to retry after {retry.retry_after:.0f} s)"
                raise LLMError(retry.message, billed=retry.billed) from None
            log.info("model API: %s; retrying in %.1f s", retry.message, delay)
            attempt += 1
            await asyncio.sleep(delay)
        except LLMError as exc:
            if shown and not isinstance(exc, StreamBroken):
                raise StreamBroken(str(exc), "".join(shown), billed=exc.billed) from None
            raise
