"""Starts the daemon's outward services (API, scheduler, chat channels) on an exit stack."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from bot.config import Config
from bot.errors import MateError
from bot.runtime import Runtime

log = logging.getLogger(__name__)


async def start_services(config: Config, rt: Runtime, stack: AsyncExitStack) -> list[Any]:
    """Returns the chat channels to supervise; everything else is owned by `stack`."""
    mate = config.mate
    if mate.api.enabled:
        from bot.api import ApiServer
        from bot.api_token import resolve_api_token
        from bot.redaction import Redactor, config_secrets, install

        token = resolve_api_token(mate.api.token, Path(mate.database.path).parent)
        install(Redactor([*config_secrets(config), token]))  # a generated token is a secret too
        try:
            server = await stack.enter_async_context(ApiServer(rt, mate.api, token))
        except OSError as exc:
            raise MateError(f"cannot listen on {mate.api.host}:{mate.api.port}: {exc.strerror}") from None
        rt.extras["api_port"] = server.port
        rt.extras["api_token"] = token  # the start-up line shows the page's address with it
    emergence = rt.extras.get("emergence")
    if emergence is not None:
        from bot.cron_runner import DaemonCronJobRunner
        from bot.scheduler import CronScheduler

        runner = DaemonCronJobRunner(rt.router, emergence)
        rt.extras["scheduler"] = await stack.enter_async_context(
            CronScheduler(rt.core.repos, runner, timezone=mate.timezone))
    channels: list[Any] = []
    if mate.channels.telegram.enabled:
        from channels.telegram.adapter import TelegramChannel

        channels.append(TelegramChannel(mate.channels.telegram, rt.router.handle, rt.core.prompts,
                                        access=rt.access.telegram))
    if mate.channels.discord.enabled:
        from channels.discord_adapter import DiscordChannel

        channels.append(DiscordChannel(mate.channels.discord, rt.router.handle, rt.core.prompts,
                                       access=rt.access.discord))
    for channel in channels:
        rt.channel_states.add(channel)
    return channels
