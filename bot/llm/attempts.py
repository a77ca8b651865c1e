"""One model answer over as many attempts as the retry policy allows: the loop both protocols share.

Each client asks once (`ask`) and maps its SDK's failures to Retryable, NotStreamed, LLMError,
or AskAgain when it changed what it sends after a refusal it can work around (a server without
the 1-hour cache, one that wants `max_completion_tokens`). What the user already saw is never
followed by a second answer: a failure after the first shown text ends as StreamBroken.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bot.errors import LLMError, StreamBroken
from bot.llm.failures import NotStreamed, Retryable
from bot.llm.port import LLMResponse, TextListener
from bot.retry import Backoff

log = logging.getLogger(__name__)


class AskAgain(Exception):
    """The client adapted its request to what the server refused: ask again at once."""


class StreamingSwitch:
    """Whether answers are asked for as a stream; off for good once the server shows it does not."""

    def __init__(self) -> None:
        self.on = True


async def answer_with_retries(
    ask: Callable[[TextListener | None], Awaitable[LLMResponse]], on_text: TextListener | None,
    policy: Backoff, streaming: StreamingSwitch,
) -> LLMResponse:
    shown: list[str] = []

    def listen(text: str) -> None:
        shown.append(text)
        assert on_text is not None
        on_text(text)

    attempt = 0
    while True:
        try:
            return await ask(listen if on_text is not None and streaming.on else None)
        except NotStreamed:
            # A proxy or local server that answers `stream: true` with a plain body or refuses it.
            log.warning("the model API does not stream answers; asking without streaming from now on")
            streaming.on = False
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
