"""The one in-process harness: the real runtime (`open_runtime`) over the fake Messages API, and the
Telegram and Discord adapters started on their fakes when a test asks for them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import discord

from bot.app.runtime import Runtime, open_runtime
from bot.llm import AnthropicClient
from channels.base import InboundMessage, MessageHandler
from channels.discord.adapter import DiscordChannel
from channels.telegram.adapter import TelegramChannel
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.discord import FakeDiscord


STOP_TIMEOUT = 10.0  # how long an adapter may take to stop (and to be ready on the Discord fake)


@asynccontextmanager
async def running(
    tmp_path: Path, fake: FakeAnthropic, *, memory_worker: bool = False,
    clock: Callable[[], datetime] | None = None, sdk: bool = True, **mate: Any,
) -> AsyncIterator[Runtime]:
    """The runtime over a database in tmp_path, its model the fake; `mate` overrides configuration keys.

    `sdk`: the test's anthropic SDK client on the fake (default), or the client the runtime builds
    from the configuration itself, as the daemon does."""
    mate.setdefault("llm", {"api-key": "k", "base-url": fake.url, "max-retries": 0})
    config = make_config(tmp_path, **mate)
    async with AsyncExitStack() as stack:
        llm = await stack.enter_async_context(AnthropicClient(config.mate.llm)) if sdk else None
        timing: dict[str, Any] = {} if clock is None else {"clock": clock}
        yield await stack.enter_async_context(
            open_runtime(config, llm=llm, with_memory_worker=memory_worker, **timing))


async def chat(rt: Runtime, text: str, sender: str = "me") -> str:
    """A console message through the router, and the reply's text."""
    reply = await rt.router.handle(InboundMessage("console", sender, sender, sender, text))
    assert reply is not None
    return reply.text


@asynccontextmanager
async def telegram_channel(
    rt: Runtime, *, handler: MessageHandler | None = None, **options: Any,
) -> AsyncIterator[tuple[TelegramChannel, asyncio.Task[None]]]:
    """The Telegram adapter of the runtime's configuration, polling the fake Bot API quickly."""
    options.setdefault("poll_timeout", 0.2)
    channel = TelegramChannel(rt.core.config.mate.channels.telegram, handler or rt.router.handle,
                              rt.core.prompts, **options)
    task = asyncio.create_task(channel.run(), name="test-telegram")
    try:
        yield channel, task
    finally:
        await channel.stop()
        await asyncio.wait_for(task, STOP_TIMEOUT)


class FastClient(discord.Client):
    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        pass  # discord.py sleeps 5 s before every (re-)IDENTIFY


def fast_client(**kwargs: Any) -> discord.Client:
    # A short guild_ready_timeout skips discord.py's 2 s wait for more GUILD_CREATEs.
    return FastClient(guild_ready_timeout=0.05, **kwargs)


@asynccontextmanager
async def discord_channel(
    rt: Runtime, dc: FakeDiscord, *, handler: MessageHandler | None = None, **options: Any,
) -> AsyncIterator[DiscordChannel]:
    """The Discord adapter of the runtime's configuration, connected to the fake gateway and ready."""
    options.setdefault("client_factory", fast_client)
    channel = DiscordChannel(rt.core.config.mate.channels.discord, handler or rt.router.handle,
                             rt.core.prompts, **options)
    task = asyncio.create_task(channel.run(), name="test-discord")
    try:
        await dc.wait_ready()
        assert channel.client is not None
        await asyncio.wait_for(channel.client.wait_until_ready(), STOP_TIMEOUT)
        yield channel
    finally:
        await channel.stop()
        await asyncio.wait_for(task, STOP_TIMEOUT)  # run() returns once the client is closed
