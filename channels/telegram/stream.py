"""TelegramReplyPreview: the reply as it is written, a draft in a direct chat or one edited message in a group."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from telegram import Bot, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import BadRequest, TelegramError

from channels.formatting import TELEGRAM_LIMIT, utf16_len
from channels.streaming import ThrottledPreview

log = logging.getLogger(__name__)

# Telegram allows a group about 20 edits a minute; direct chats take one a second.
GROUP_INTERVAL = 3.0
# A draft disappears about 30 s after its last update; a long tool round re-sends it.
DRAFT_REFRESH = 20.0

Retrying = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]


def chat_ref(chat_id: str) -> int | str:
    return int(chat_id) if chat_id.lstrip("-").isdigit() else chat_id


def thread_ref(thread_id: str | None) -> int | None:
    return int(thread_id) if thread_id else None


class TelegramReplyPreview:
    """`stream` is the ReplyStream the agent writes to; `finish` turns the preview into the reply.

    In a direct chat the preview is a draft (`sendMessageDraft`), which the sent reply
    replaces by itself. In a group it is a message quoting the question, edited as the
    answer grows; the reply's first chunk is edited into it.
    """

    def __init__(self, bot: Callable[[], Bot], retrying: Retrying, describe: Callable[[BaseException], str],
                 chat_id: str, thread_id: str | None, reply_to: int | None, *, draft_id: int | None) -> None:
        self._bot = bot
        self._retrying = retrying
        self._describe = describe
        self._chat = chat_ref(chat_id)
        self._thread = thread_ref(thread_id)
        self._reply_to = reply_to
        self._draft_id = draft_id
        self.message_id: int | None = None
        direct = draft_id is not None
        self.stream = ThrottledPreview(self._show, limit=TELEGRAM_LIMIT - 1, length=utf16_len,
                                       interval=1.0 if direct else GROUP_INTERVAL,
                                       refresh=DRAFT_REFRESH if direct else None)

    async def _show(self, text: str) -> None:
        bot = self._bot()
        if self._draft_id is not None:
            await bot.send_message_draft(int(self._chat), self._draft_id, text, message_thread_id=self._thread)
        elif self.message_id is None:
            reply = ReplyParameters(self._reply_to, allow_sending_without_reply=True) if self._reply_to else None
            sent = await bot.send_message(self._chat, text, message_thread_id=self._thread, reply_parameters=reply)
            self.message_id = sent.message_id
        else:
            await bot.edit_message_text(text, chat_id=self._chat, message_id=self.message_id)

    async def finish(self, markdown: str, rendered: str | None) -> bool:
        """Edit the preview message into the reply's first chunk (HTML, else plain text).

        False when there is no preview message or it cannot be edited; then the preview is
        deleted, so the chat does not keep half an answer above the whole one.
        """
        message_id, self.message_id = self.message_id, None
        if message_id is None:
            return False
        for text, mode in ((rendered, ParseMode.HTML), (markdown, None)):
            if text is None:
                continue
            try:
                await self._retrying(lambda: self._bot().edit_message_text(
                    text=text, chat_id=self._chat, message_id=message_id, parse_mode=mode))
                return True
            except BadRequest as exc:
                if "not modified" in str(exc).lower():
                    return True  # the preview already shows exactly this
                if mode is None or "entit" not in str(exc).lower():
                    log.info("could not edit the preview (%s); sending the reply anew", self._describe(exc))
                    break
            except TelegramError as exc:
                log.info("could not edit the preview (%s); sending the reply anew", self._describe(exc))
                break
        await self._delete(message_id)
        return False

    async def discard(self) -> None:
        """No reply follows (an error, nothing to say): the preview must not stay as if it were one."""
        message_id, self.message_id = self.message_id, None
        if message_id is not None:
            await self._delete(message_id)

    async def _delete(self, message_id: int) -> None:
        try:
            await self._bot().delete_message(self._chat, message_id)
        except TelegramError as exc:
            log.info("could not delete the preview: %s", self._describe(exc))
