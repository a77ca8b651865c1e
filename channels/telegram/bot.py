"""The python-telegram-bot pieces the adapter builds on: the Bot for a config (with getUpdates
answers as JSON), how it is closed, replies rendered into Telegram HTML chunks, and a 429's wait."""

from __future__ import annotations

import datetime as dtm
import logging
import warnings
from collections.abc import Sequence

from telegram import Bot
from telegram.error import RetryAfter, TelegramError
from telegram.request import HTTPXRequest
from telegram.warnings import PTBDeprecationWarning

from bot.core.config import TelegramConfig
from bot.core.errors import MateError
from channels.formatting import (
    TELEGRAM_LIMIT,
    markdown_to_telegram_html,
    split_message,
    utf16_len,
)

log = logging.getLogger(__name__)

# Markdown is split well below the limit: the HTML rendering must still fit after conversion.
MARKDOWN_CHUNK = 3500
MIN_CHUNK = 256
# Connections a bot keeps for replies: enough for every update handled at once, twice.
CONNECTIONS = 128


class UnexpectedAnswer(TelegramError):
    """The Bot API answered with something that is not what the method returns."""


class PollingBot(Bot):
    """A Bot whose getUpdates answer comes back as JSON, to be read update by update.

    Bot.get_updates reads a whole answer at once: one update python-telegram-bot cannot read
    fails every update with it, the offset never moves past it, and PTB logs the whole answer
    (what users wrote included) at CRITICAL level.
    """

    async def get_update_dicts(
        self, *, offset: int | None, timeout: dtm.timedelta, allowed_updates: Sequence[str], limit: int | None = None,
    ) -> list[object]:
        """getUpdates as Bot.get_updates sends it (same request object, timeouts and errors), unread."""
        # As get_updates does: a long poll may take `timeout` on top of the request's own read timeout.
        read_timeout = (self._request[0].read_timeout or 0) + timeout.total_seconds()
        result = await self._post(
            "getUpdates",
            {"offset": offset, "limit": limit, "timeout": timeout, "allowed_updates": list(allowed_updates)},
            read_timeout=read_timeout,
        )
        if not isinstance(result, list):
            raise UnexpectedAnswer(f"getUpdates answered a {type(result).__name__}, not a list")
        return result


def require_token(config: TelegramConfig) -> None:
    if not config.token:
        raise MateError("channels.telegram.token is empty")


def build_bot(config: TelegramConfig) -> PollingBot:
    """A fresh PTB Bot for a config (its own HTTP clients), optionally on an own Bot API server."""
    require_token(config)
    base, file_base = "https://api.telegram.org/bot", "https://api.telegram.org/file/bot"
    if config.base_url:
        base = config.base_url.rstrip("/")
        if not base.endswith("/bot"):
            base += "/bot"  # PTB appends the token right after it
        file_base = base[: -len("/bot")] + "/file/bot"
    return PollingBot(config.token, base_url=base, base_file_url=file_base,
                      request=HTTPXRequest(connection_pool_size=CONNECTIONS),
                      get_updates_request=HTTPXRequest(connection_pool_size=1))


async def close_bot(bot: Bot) -> None:
    """Close a bot's HTTP clients, whether or not its initialize() got through."""
    try:
        await bot.shutdown()
        for request in (bot.request, bot._request[0]):
            await request.shutdown()  # idempotent; covers a bot that never initialized
    except Exception as exc:  # closing must not mask what happened before
        log.debug("closing a telegram bot failed: %s", type(exc).__name__)


def render_chunks(text: str, limit: int = MARKDOWN_CHUNK) -> list[tuple[str, str | None]]:
    """(markdown, html) pairs that each fit Telegram's limit; html None when only plain text fits."""
    out: list[tuple[str, str | None]] = []
    for chunk in split_message(text, limit, length=utf16_len):
        rendered = markdown_to_telegram_html(chunk)
        if not rendered.strip():
            out.append((chunk, None))
        elif utf16_len(rendered) <= TELEGRAM_LIMIT:
            out.append((chunk, rendered))
        elif limit // 2 >= MIN_CHUNK:  # heavy escaping: split this piece finer
            out.extend(render_chunks(chunk, limit // 2))
        else:
            out.append((chunk, None))
    return out


def retry_seconds(exc: RetryAfter) -> float:
    """retry_after as seconds, whichever type PTB_TIMEDELTA makes PTB return."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


