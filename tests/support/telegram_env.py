"""A Telegram chat with the real runtime: python-telegram-bot on the fake Bot API, the anthropic SDK
on the fake Messages API, real SQLite."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.app.runtime import Runtime
from bot.conversation.router import RoutedReply
from bot.core.config import Config
from channels.telegram.adapter import TelegramChannel
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.telegram import FakeTelegram
from tests.support.runtime import running as running_runtime
from tests.support.runtime import telegram_channel

ADMIN = 42
FRIEND = 7
STRANGER = 555
GROUP = -1001
TOKEN = FakeTelegram.token

Handler = Callable[..., Awaitable[RoutedReply | None]]  # (message, *, stored) as the router takes it


@dataclass
class Env:
    tg: FakeTelegram
    llm: FakeAnthropic
    rt: Runtime
    config: Config
    channel: TelegramChannel
    task: asyncio.Task[None]

    def llm_requests(self) -> list[dict[str, Any]]:
        return self.llm.messages_requests()

    async def settle(self) -> None:
        """Wait until the channel polls, the fake has handed out every pushed update and they are confirmed."""
        await self.tg.wait_for_call("getUpdates")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while self.tg._updates and loop.time() < deadline:
            await asyncio.sleep(0.02)
        # The poll after them carries the offset that confirms them (a test that holds a handler
        # back may see none: then settling ends at the deadline, as above).
        polls = len(self.tg.offsets)
        while len(self.tg.offsets) <= polls and loop.time() < deadline + 5:
            await asyncio.sleep(0.02)


@asynccontextmanager
async def running(
    tmp_path: Path, *, memory_worker: bool = False, handler: Callable[[Runtime], Handler] | None = None,
    tg: FakeTelegram | None = None, group_policy: str = "open",
) -> AsyncIterator[Env]:
    async with FakeAnthropic(default_text="hello from the model") as fake_llm:
        async with tg or FakeTelegram() as fake_tg:
            async with running_runtime(
                tmp_path, fake_llm, memory_worker=memory_worker,
                # Room for the long answers some tests script (the fake cuts at max_tokens).
                llm={"api-key": "k", "base-url": fake_llm.url, "max-retries": 0, "max-output-tokens": 8192},
                channels={"telegram": {"enabled": True, "token": TOKEN, "base-url": fake_tg.base_url,
                                       "admins": [str(ADMIN)], "allowed-users": [str(FRIEND)],
                                       "group-policy": group_policy}},
            ) as rt, telegram_channel(rt, handler=handler(rt) if handler else None, backoff_base=0.05,
                                      backoff_max=0.2, busy_poll_interval=0.05) as (channel, task):
                yield Env(fake_tg, fake_llm, rt, rt.core.config, channel, task)
