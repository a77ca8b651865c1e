"""What the Telegram adapter says about errors (the bot token blanked out), and which it retries."""

from __future__ import annotations

import logging
import traceback

from telegram.error import BadRequest, NetworkError, RetryAfter

from channels.base import OutboundMessage
from channels.telegram.bot import retry_seconds

log = logging.getLogger("channels.telegram.adapter")  # the adapter's lines, as before


def blank(text: str, token: str) -> str:
    """`text` with the bot token (or its secret half) blanked out."""
    for secret in (token, token.partition(":")[2]):
        if secret:
            text = text.replace(secret, "<token>")
    return text


def describe(exc: BaseException | None, token: str) -> str:
    """Type and message of an error with the bot token (or its secret half) blanked out."""
    if exc is None:
        return "unknown error"
    return blank(f"{type(exc).__name__}: {exc}", token)


def log_retry(exc: BaseException, failures: int, delay: float, token: str) -> None:
    """One WARNING line per retry; the traceback joins it only at DEBUG level."""
    # "Unreachable" only where the network failed: an odd answer is the server's doing.
    network = isinstance(exc, (NetworkError, OSError)) and not isinstance(exc, BadRequest)
    what = "unreachable" if network else "answered unexpectedly"
    line = f"telegram Bot API {what} ({describe(exc, token)}); retry {failures} in {delay:.1f} s"
    if log.isEnabledFor(logging.DEBUG):
        line += "\n" + blank("".join(traceback.format_exception(exc)).rstrip(), token)
    log.warning("%s", line, extra={"channel": "telegram"})


def log_dropped(message: OutboundMessage, exc: BaseException, token: str) -> None:
    log.error("telegram message chunk dropped: %s", describe(exc, token),
              extra={"channel": "telegram", "chat_id": message.chat_id})


def send_retryable(exc: Exception) -> bool:
    # BadRequest is a NetworkError subclass, but never transient; NetworkError includes
    # TimedOut and 5xx answers.
    return isinstance(exc, RetryAfter) or (isinstance(exc, NetworkError) and not isinstance(exc, BadRequest))


def told_wait(exc: Exception) -> float | None:
    """The wait a 429 asked for; None for other failures (they get the backoff)."""
    return retry_seconds(exc) if isinstance(exc, RetryAfter) else None
