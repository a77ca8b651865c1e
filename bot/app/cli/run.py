"""`matebot run` and `matebot chat`: the daemon, with or without the console."""

from __future__ import annotations

import argparse
import sys

from bot.app.cli.exits import EXIT_RUNTIME, EXIT_USAGE
from bot.core.config import Config


async def run(config: Config, args: argparse.Namespace) -> int:
    from bot.app.daemon import run_daemon

    return await run_daemon(config)


async def chat(config: Config, args: argparse.Namespace) -> int:
    from bot.app.daemon import run_daemon

    if args.agent not in [a.id for a in config.mate.agents]:
        print(f"matebot: agent {args.agent} is not configured in mate.agents", file=sys.stderr)
        return EXIT_USAGE
    from bot.app.cli.chat_client import attach, daemon_running

    if daemon_running(config):  # it holds the database: talk to it instead
        if not config.mate.api.enabled:
            print("matebot: a matebot daemon is running on this database and its API is off "
                  "(mate.api.enabled); stop it or turn the API on", file=sys.stderr)
            return EXIT_RUNTIME
        return await attach(config, args.agent)
    return await run_daemon(console_routed_to(config, args.agent), console=True,
                            exit_when_console_closes=True)


def console_routed_to(config: Config, agent_id: int) -> Config:
    """The same config with console chats routed to `agent_id` first."""
    from bot.core.config import RouteRule

    mate = config.mate
    routing = (RouteRule(channel="console", chat="*", agent=agent_id), *mate.routing)
    return config.model_copy(update={"mate": mate.model_copy(update={"routing": routing})})
