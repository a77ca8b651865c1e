"""A Telegram channel standing by (another daemon holds the bot's lease): one bot kept for its
replies, no reconnect at each try for the lease, the state steady (python-telegram-bot on the fake)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bot.core.prompts import PromptLibrary
from channels.base import CHANNEL_STANDBY, OutboundMessage
from channels.telegram.adapter import TelegramChannel
from tests.support.config import make_config
from tests.support.eventually import eventually
from tests.support.fakes.telegram import FakeTelegram


class HeldElsewhere:
    """Leases another daemon holds: every try fails."""

    renew_every = 0.02

    def __init__(self) -> None:
        self.tries = 0

    @asynccontextmanager
    async def held(self, name: str, lost: asyncio.Event | None = None) -> AsyncIterator[bool]:
        self.tries += 1
        yield False


async def _unused_handler(*args: object, **kwargs: object) -> None:
    raise AssertionError("a standby channel takes no messages")


async def test_a_standby_channel_keeps_one_bot_and_still_sends(tmp_path: Path) -> None:
    async with FakeTelegram() as tg:
        config = make_config(tmp_path, channels={"telegram": {"enabled": True, "token": tg.token,
                                                              "base-url": tg.base_url}})
        leases = HeldElsewhere()
        channel = TelegramChannel(config.mate.channels.telegram, _unused_handler, PromptLibrary("en"),
                                  leases=leases, poll_timeout=0.2)
        task = asyncio.create_task(channel.run())
        try:
            await eventually(lambda: leases.tries >= 20, "twenty tries for the lease")
            assert channel.state == CHANNEL_STANDBY
            assert len(tg.calls_of("getMe")) == 1 and len(tg.calls_of("deleteWebhook")) == 1
            assert not any(method == "getUpdates" for method, _ in tg.calls)
            await channel.send(OutboundMessage("telegram", "42", "a reminder"))
            assert [m["text"] for m in tg.sent] == ["a reminder"]
        finally:
            await channel.stop()
            await asyncio.wait_for(task, 10)
