"""Starts the daemon's outward services (API, scheduler, chat channels) on an exit stack."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

from bot.core.config import Config
from bot.core.errors import MateError
from bot.app.runtime import Runtime
from bot.schedule.reminders.delivery import ChannelOutbox, ReminderDelivery
from bot.schedule.timer import SystemRun, TaskTimer
from channels.base import Channel

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ApiAddress:
    """Where the API listens; the start-up line shows the web page's address with the token."""

    port: int
    token: str


@dataclass(frozen=True, slots=True)
class Services:
    """What start_services started: the chat channels to supervise, and the API and the timer of
    scheduled tasks (closed by the stack). `outbox` is where reminders are sent: the channels, and
    the console once the daemon starts it."""

    channels: tuple[Channel, ...]
    api: ApiAddress | None
    outbox: ChannelOutbox
    timer: TaskTimer


async def start_services(config: Config, rt: Runtime, stack: AsyncExitStack) -> Services:
    """The chat channels are built, not run: the daemon supervises them; everything else is owned by `stack`."""
    mate = config.mate
    api = None
    if mate.api.enabled:
        from bot.app.api.server import ApiServer
        from bot.app.api.token import resolve_api_token
        from bot.core.redaction import Redactor, config_secrets, install

        token = resolve_api_token(mate.api.token, Path(mate.database.path).parent)
        install(Redactor([*config_secrets(config), token]))  # a generated token is a secret too
        try:
            server = await stack.enter_async_context(ApiServer(rt, mate.api, token))
        except OSError as exc:
            raise MateError(f"cannot listen on {mate.api.host}:{mate.api.port}: {exc.strerror}") from None
        api = ApiAddress(server.port, token)
    system: SystemRun | None = None
    if rt.memory_services is not None:
        from bot.schedule.system_tasks import SystemTaskRunner

        system = SystemTaskRunner(rt.router, rt.memory_services.emergence, rt.consolidation_turns,
                                  rt.core.repos.search_index, clock=rt.clock)
    channels: list[Channel] = []
    if mate.channels.telegram.enabled:
        from channels.telegram.adapter import TelegramChannel

        channels.append(TelegramChannel(mate.channels.telegram, rt.router.handle, rt.core.prompts,
                                        access=rt.access.telegram, leases=rt.leases))
    if mate.channels.discord.enabled:
        from channels.discord.adapter import DiscordChannel

        channels.append(DiscordChannel(mate.channels.discord, rt.router.handle, rt.core.prompts,
                                       access=rt.access.discord, leases=rt.leases))
    outbox = rt.outbox
    for channel in channels:
        rt.channel_states.add(channel)
        outbox.add(channel)
    delivery = ReminderDelivery(rt.router, outbox, rt.core.prompts, rt.access, rt.core.repos)
    timer = await stack.enter_async_context(TaskTimer(
        rt.core.repos.tasks, rt.tasks, delivery, catch_up_minutes=mate.tasks.catch_up_minutes, system=system,
        timezone=mate.timezone, clock=rt.clock))
    return Services(tuple(channels), api, outbox, timer)
