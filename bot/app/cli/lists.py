"""`matebot conversations`, `people` and `tasks`: what the database holds, listed."""

from __future__ import annotations

import argparse
import sys

from bot.app.cli.exits import EXIT_OK
from bot.core.config import Config


async def conversations(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core

    async with open_core(config) as core:
        if args.agent is not None:
            await core.agents.get(args.agent)
        listed = await core.repos.conversations.recent_activity(args.agent)
    for item in listed:
        c = item.conversation
        state = "archived" if c.archived else "active"
        print(f"{c.id}\tagent {c.agent_id}\t{c.channel}\t{item.message_count} messages\t{state}\t"
              f"last {item.last_activity}")
    if not listed:
        print("no conversations yet", file=sys.stderr)
    return EXIT_OK


async def people(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core
    from bot.storage.people import OWNER_PERSON_ID

    async with open_core(config) as core:  # opening writes the config's links, as the daemon's start does
        listed = await core.people.list()
    for person in listed:
        agent = f"agent {person.agent_id}" if person.agent_id is not None else "no agent yet"
        role = "owner" if person.id == OWNER_PERSON_ID else "person"
        print(f"{person.id}\t{person.name}\t{role}\t{agent}\t{' '.join(person.accounts) or '-'}")
    return EXIT_OK


async def tasks(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core

    async with open_core(config) as core:
        if args.agent is not None:
            await core.agents.get(args.agent)
        service = core.tasks
        listed = await service.for_agent(args.agent)
    for task in listed:
        chat = task.chat
        where = f"{chat.channel}:{chat.chat_id}" + (f":{chat.thread_id}" if chat.thread_id else "")
        repeat = f"cron {task.cron}" if task.cron else "once"
        print(f"{task.id}\tagent {task.agent_id}\t{where}\tnext {service.next_run_text(task)}\t{repeat}\t"
              f"by {task.created_by_name or task.created_by}\t{' '.join(task.message.split())}")
    if not listed:
        print("no scheduled tasks", file=sys.stderr)
    return EXIT_OK
