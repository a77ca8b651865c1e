"""A Discord server with the real runtime: the real discord.py client on FakeDiscord, the runtime
building its own model client over the fake Messages API, real SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import discord
import discord.gateway
import discord.http

from bot.app.runtime import Runtime
from bot.conversation.router import RoutedReply
from channels.base import InboundMessage, Stored
from channels.discord.adapter import DiscordChannel
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.discord import FakeDiscord
from tests.support.runtime import FastClient, discord_channel, fast_client, running

ADMIN = "7"
ALLOWED = "42"
DEFAULT_BASE = discord.http.Route.BASE
DEFAULT_GATEWAY = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY


class RecordingHandler:
    """The real router's handle(), remembering what the adapter passed in."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self.inbound: list[InboundMessage] = []
        self.stored_callbacks: list[Stored | None] = []

    async def __call__(
        self, message: InboundMessage, *, stored: Stored | None = None, stream: Any = None,
    ) -> RoutedReply | None:
        self.inbound.append(message)
        self.stored_callbacks.append(stored)
        return await self._rt.router.handle(message, stored=stored, stream=stream)


@dataclass
class Env:
    dc: FakeDiscord
    fa: FakeAnthropic
    rt: Runtime
    channel: DiscordChannel
    handler: RecordingHandler

    def text(self, key: str, **values: Any) -> str:
        return self.rt.core.prompts.text(key, **values)


async def open_env(tmp_path: Path, *, stream: bool, media: dict[str, Any] | None = None) -> AsyncIterator[Env]:
    async with FakeAnthropic() as fa, FakeDiscord() as dc:
        async with running(
            tmp_path, fa, sdk=False, memory_worker=True, media=media or {},
            # Whole replies: these tests read the message sent; streaming has its own tests.
            llm={"provider": "anthropic", "api-key": "test-key", "base-url": fa.url, "max-retries": 0,
                 "stream": stream},
            channels={"discord": {
                "enabled": True, "token": "TOKEN", "admins": [ADMIN], "allowed-users": [ALLOWED],
                "allowed-guilds": ["100"], "api-base-url": dc.api_base, "gateway-url": dc.gateway_url,
            }},
        ) as rt:
            handler = RecordingHandler(rt)
            async with discord_channel(rt, dc, handler=handler) as channel:
                yield Env(dc, fa, rt, channel, handler)
    assert discord.http.Route.BASE == DEFAULT_BASE
    assert discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY == DEFAULT_GATEWAY


__all__ = ["FastClient", "fast_client"]
