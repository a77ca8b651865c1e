"""What the Discord adapter makes of a message and writes back: its clean text and files, the typing
indicator, and the reply previewed in one message edited as it is written."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import discord

from channels.base import IncomingFile
from channels.formatting import DISCORD_LIMIT
from channels.streaming import ThrottledPreview

log = logging.getLogger("channels.discord.adapter")  # the adapter's lines, as before

# Typing lasts ~10 s on Discord's side; refresh a little before it runs out.
TYPING_REFRESH_S = 8.0
# A reply never pings anyone, whatever the model wrote ("@everyone" stays text).
NO_PINGS = discord.AllowedMentions.none()


def clean_text(message: discord.Message, bot_id: int) -> str:
    """The text without the bot's own mention; other user mentions become @names."""
    text = re.sub(rf"<@!?{bot_id}>", " ", message.content)
    for user in message.mentions:
        if user.id != bot_id:
            text = re.sub(rf"<@!?{user.id}>", f"@{user.display_name}", text)
    return text.strip()


@asynccontextmanager
async def keep_typing(channel: discord.abc.Messageable) -> AsyncIterator[None]:
    """Best-effort typing indicator while the body runs; a failed typing call never loses a reply."""

    async def loop() -> None:
        while True:
            try:
                await channel.typing()
            except (discord.HTTPException, OSError, asyncio.TimeoutError):
                log.debug("typing indicator failed", exc_info=True)
            await asyncio.sleep(TYPING_REFRESH_S)

    task = asyncio.create_task(loop(), name="discord-typing")
    try:
        yield
    finally:
        task.cancel()
        # gather keeps our own cancellation visible while swallowing the typing task's.
        await asyncio.gather(task, return_exceptions=True)


class Preview:
    """The reply as it is written: one message, edited in place; the reply's first part ends it."""

    def __init__(self, question: discord.Message) -> None:
        self._question = question
        self._sent: discord.Message | None = None
        self.stream = ThrottledPreview(self._show, limit=DISCORD_LIMIT - 1)

    async def _show(self, text: str) -> None:
        if self._sent is None:
            self._sent = await self._question.channel.send(
                text, reference=self._question.to_reference(fail_if_not_exists=False), allowed_mentions=NO_PINGS)
        else:
            await self._sent.edit(content=text, allowed_mentions=NO_PINGS)

    async def discard(self) -> None:
        """No reply follows: half an answer must not stay as if it were one."""
        sent, self._sent = self._sent, None
        if sent is not None:
            with contextlib.suppress(discord.HTTPException):
                await sent.delete()

    async def replace(self, text: str) -> bool:
        """Edit the preview into `text`; False when there is none or it cannot be edited (then it is deleted)."""
        if self._sent is None:
            return False
        if text == self.stream.shown:
            return True
        try:
            await self._sent.edit(content=text, allowed_mentions=NO_PINGS)
        except discord.HTTPException as exc:
            log.info("could not edit the preview (%s); sending the reply anew", exc)
            with contextlib.suppress(discord.HTTPException):  # half an answer above the whole one confuses
                await self._sent.delete()
            return False
        return True


def file_of(attachment: discord.Attachment) -> IncomingFile:
    """An attachment, fetched only if the router answers it; a voice message says how long it is."""
    return IncomingFile(attachment.filename, attachment.content_type or "", attachment.size, attachment.read,
                        is_voice=attachment.is_voice_message(), duration=attachment.duration)
