"""Discord on several daemons: the daemon holding the bot's lease connects to the gateway, another
stands by logged in for sending only, and takes over when the first stops (discord.py on the fake
gateway and REST API; the leases in a real database)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.storage.leases import Leases
from channels.base import CHANNEL_OK, CHANNEL_STANDBY, OutboundMessage
from channels.discord.adapter import DiscordChannel
from tests.support.eventually import eventually
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.discord import FakeDiscord
from tests.support.runtime import fast_client, running


async def test_one_daemon_connects_the_other_stands_by_sends_and_takes_over(tmp_path: Path) -> None:
    async with FakeAnthropic() as llm, FakeDiscord() as dc, running(
            tmp_path, llm, channels={"discord": {"enabled": True, "token": "TOKEN", "admins": ["42"],
                                                 "api-base-url": dc.api_base, "gateway-url": dc.gateway_url}}) as rt:
        config = rt.core.config.mate.channels.discord

        def daemon(holder: str) -> DiscordChannel:
            leases = Leases(rt.core.repos.leases, holder, seconds=2.0, renew_every=0.1)
            return DiscordChannel(config, rt.router.handle, rt.core.prompts, client_factory=fast_client,
                                  leases=leases)

        first, second = daemon("a"), daemon("b")
        first_run = asyncio.create_task(first.run())
        await eventually(lambda: first.state == CHANNEL_OK, "the first daemon connected")
        second_run = asyncio.create_task(second.run())
        try:
            await eventually(lambda: second.state == CHANNEL_STANDBY, "the second daemon standing by")
            assert len(dc.identifies) == 1  # one gateway session for the bot
            await second.send(OutboundMessage("discord", "555", "a reminder from the standby daemon"))
            sent = await dc.wait_sent(1)
            assert sent[0]["content"] == "a reminder from the standby daemon"
            await first.stop()
            await asyncio.wait_for(first_run, 10)
            await eventually(lambda: second.state == CHANNEL_OK, "the second daemon connected", timeout=20)
            assert len(dc.identifies) == 2
        finally:
            await second.stop()
            await asyncio.wait_for(second_run, 10)
            if not first_run.done():
                await first.stop()
