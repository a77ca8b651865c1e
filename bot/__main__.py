"""Command line: `matebot run|chat|check-config|memory ...` with the exit codes of SPEC S16."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import yaml

from bot.config import Config, load_config, masked_dump
from bot.errors import ConfigError, MateError
from bot.log_setup import configure_daemon, configure_terminal
from bot.redaction import Redactor, config_secrets, install

log = logging.getLogger("bot")

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"matebot: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    # SUPPRESS: the option may stand before or after the command without one erasing the other.
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help="config file (default: $MATE_CONFIG or ./config.yaml)")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug logging (the same as --log-level debug)")
    common.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=argparse.SUPPRESS,
                        help="log level (default: mate.log.level, else info)")
    parser = _Parser(prog="matebot", description="Self-hosted chat assistant with durable memory.",
                     parents=[common])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("run", parents=[common], help="run the daemon")
    chat = commands.add_parser("chat", parents=[common], help="console chat through the full pipeline")
    chat.add_argument("--agent", type=int, default=1)
    commands.add_parser("check-config", parents=[common], help="print the effective configuration")
    backup = commands.add_parser("backup", parents=[common], help="copy the database and media files into DIR")
    backup.add_argument("dir", type=Path)
    memory = commands.add_parser("memory", parents=[common], help="inspect and maintain memory")
    actions = memory.add_subparsers(dest="action", required=True, parser_class=_Parser)
    emerge = actions.add_parser("emerge", parents=[common], help="consolidate daily notes now")
    emerge.add_argument("--agent", type=int, required=True)
    summarize = actions.add_parser("summarize", parents=[common], help="extract memory from a conversation now")
    summarize.add_argument("--agent", type=int, required=True)
    summarize.add_argument("--conversation", required=True)
    show = actions.add_parser("show", parents=[common], help="list files, or print one")
    show.add_argument("--agent", type=int, required=True)
    show.add_argument("filename", nargs="?")
    search = actions.add_parser("search", parents=[common], help="search conversations and memory files")
    search.add_argument("--agent", type=int, required=True)
    search.add_argument("--limit", type=int, default=5)
    search.add_argument("--json", action="store_true", help="print the result as JSON")
    search.add_argument("query", nargs="+")
    for name in ("export", "import"):
        transfer = actions.add_parser(name, parents=[common], help=f"{name} the workspace files")
        transfer.add_argument("--agent", type=int, required=True)
        transfer.add_argument("dir", type=Path)
    for name in ("enable", "disable"):
        toggle = actions.add_parser(name, parents=[common],
                                    help=f"{name} a file's injection into the system prompt")
        toggle.add_argument("--agent", type=int, required=True)
        toggle.add_argument("filename")
    conversations = commands.add_parser("conversations", parents=[common],
                                        help="list conversation ids with their last activity")
    conversations.add_argument("--agent", type=int)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # python-telegram-bot warns on every rate-limit answer unless its timedelta API is chosen.
    os.environ.setdefault("PTB_TIMEDELTA", "true")
    args = build_parser().parse_args(argv)
    cli_level = "debug" if getattr(args, "verbose", False) else getattr(args, "log_level", None)
    configure_terminal(cli_level or "warning")  # commands other than run/chat print their answer, not progress
    try:
        config = load_config(getattr(args, "config", None))
    except ConfigError as exc:
        print(f"matebot: config error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.command in ("run", "chat"):
        from bot.daemon import console_wanted

        try:
            configure_daemon(config.mate.log, cli_level=cli_level,
                             console=args.command == "chat" or console_wanted(config))
        except ConfigError as exc:
            print(f"matebot: config error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    elif config.mate.log.level and not cli_level:
        configure_terminal(config.mate.log.level)
    redact = Redactor(config_secrets(config))
    install(redact)
    handler = _HANDLERS.get(args.command if args.command != "memory" else f"memory {args.action}")
    assert handler is not None
    try:
        return asyncio.run(handler(config, args))
    except KeyboardInterrupt:
        return EXIT_OK
    except ConfigError as exc:  # found once the database is open (an agent id already taken)
        print(f"matebot: config error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MateError as exc:
        print(redact(f"matebot: {exc}"), file=sys.stderr)
        return EXIT_RUNTIME
    except OSError as exc:  # a folder or the database that cannot be read or written
        where = f" ({exc.filename})" if exc.filename else ""
        print(redact(f"matebot: {exc.strerror or exc}{where}"), file=sys.stderr)
        return EXIT_RUNTIME


async def _check_config(config: Config, args: argparse.Namespace) -> int:
    from bot.agents import configured_id_collision
    from bot.storage.agents import read_chat_bindings

    bindings = read_chat_bindings(config.mate.database.path)  # read-only; {} before the first start
    problem = configured_id_collision(config.mate, bindings)
    if problem:
        raise ConfigError(problem)
    # The redactor also masks credentials inside URLs (a base-url with user:password@).
    redact = Redactor(config_secrets(config))
    print(redact(yaml.safe_dump(masked_dump(config), sort_keys=False, allow_unicode=True)), end="")
    llm = config.mate.llm
    resolved = f"anthropic, model {llm.model}" if llm.uses_anthropic else "offline (canned replies, no model)"
    why = " (no API key)" if llm.provider == "auto" and not llm.uses_anthropic else ""
    print(f"# provider {llm.provider} resolves to: {resolved}{why}")
    return EXIT_OK


async def _memory_show(config: Config, args: argparse.Namespace) -> int:
    from bot.app import open_core

    async with open_core(config) as core:
        await core.agents.get(args.agent)
        if args.filename:
            found = await core.workspace.get(args.agent, args.filename)
            if found is None:
                print(f"matebot: agent {args.agent} has no file {args.filename}", file=sys.stderr)
                return EXIT_RUNTIME
            print(found.content)
            return EXIT_OK
        for record in await core.workspace.list(args.agent):
            flag = "enabled " if record.enabled else "disabled"
            print(f"{record.filename}\t{flag}\t{record.file_size} B\tv{record.version}\t{record.update_time}")
    return EXIT_OK


async def _memory_search(config: Config, args: argparse.Namespace) -> int:
    import json

    from bot.app import open_core
    from bot.commands import search_lines
    from memory.recall import MAX_LIMIT, MemorySearchService

    if not 1 <= args.limit <= MAX_LIMIT:
        print(f"matebot: --limit must be from 1 to {MAX_LIMIT}", file=sys.stderr)
        return EXIT_USAGE
    async with open_core(config) as core:
        await core.agents.get(args.agent)
        result = await MemorySearchService(core.repos.search).search(args.agent, " ".join(args.query), args.limit)
        print(json.dumps(result, ensure_ascii=False, indent=2) if args.json else search_lines(core.prompts, result))
    return EXIT_OK


async def _memory_export(config: Config, args: argparse.Namespace) -> int:
    from bot.app import open_core
    from memory.transfer import export_workspace

    async with open_core(config) as core:
        await core.agents.get(args.agent)
        report = await export_workspace(core.workspace, args.agent, args.dir)
    print(f"exported {len(report.written)} files to {args.dir}")
    for name, why in report.refused:
        print(f"matebot: not exported {name}: {why}", file=sys.stderr)
    return EXIT_OK if not report.refused else EXIT_RUNTIME


async def _memory_import(config: Config, args: argparse.Namespace) -> int:
    from bot.app import open_core
    from memory.transfer import import_workspace

    async with open_core(config) as core:
        await core.agents.get(args.agent)
        report = await import_workspace(core.workspace, args.agent, args.dir)
    flags = f", {len(report.flags_changed)} with new flags" if report.flags_changed else ""
    print(f"imported {len(report.written)} files, {len(report.unchanged)} unchanged{flags}")
    for name, why in report.refused:
        print(f"matebot: refused {name}: {why}", file=sys.stderr)
    return EXIT_OK if not report.refused else EXIT_RUNTIME


async def _memory_toggle(config: Config, args: argparse.Namespace) -> int:
    from bot.app import open_core

    enabled = args.action == "enable"
    async with open_core(config) as core:
        await core.agents.get(args.agent)
        if await core.workspace.get(args.agent, args.filename) is None:
            print(f"matebot: agent {args.agent} has no file {args.filename}", file=sys.stderr)
            return EXIT_RUNTIME
        await core.workspace.set_enabled(args.agent, args.filename, enabled)
    print(f"{args.filename} {'enabled' if enabled else 'disabled'} for agent {args.agent}")
    return EXIT_OK


async def _backup(config: Config, args: argparse.Namespace) -> int:
    import sqlite3

    from bot.backup import back_up

    try:
        report = await asyncio.to_thread(back_up, Path(config.mate.database.path), args.dir)
    except (OSError, sqlite3.Error) as exc:
        print(f"matebot: backup failed: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    print(f"database copied to {report.database}; {report.media_copied} new media files in {args.dir / 'media'}")
    return EXIT_OK


async def _conversations(config: Config, args: argparse.Namespace) -> int:
    from bot.app import open_core

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


async def _run(config: Config, args: argparse.Namespace) -> int:
    from bot.daemon import run_daemon

    return await run_daemon(config)


async def _chat(config: Config, args: argparse.Namespace) -> int:
    from bot.daemon import run_daemon

    if args.agent not in [a.id for a in config.mate.agents]:
        print(f"matebot: agent {args.agent} is not configured in mate.agents", file=sys.stderr)
        return EXIT_USAGE
    from bot.chat_client import attach, daemon_running

    if daemon_running(config):  # it holds the database: talk to it instead
        if not config.mate.api.enabled:
            print("matebot: a matebot daemon is running on this database and its API is off "
                  "(mate.api.enabled); stop it or turn the API on", file=sys.stderr)
            return EXIT_RUNTIME
        return await attach(config, args.agent)
    return await run_daemon(_console_routed_to(config, args.agent), console=True,
                            exit_when_console_closes=True)


def _console_routed_to(config: Config, agent_id: int) -> Config:
    """The same config with console chats routed to `agent_id` first."""
    from bot.config import RouteRule

    mate = config.mate
    routing = (RouteRule(channel="console", chat="*", agent=agent_id), *mate.routing)
    return config.model_copy(update={"mate": mate.model_copy(update={"routing": routing})})


async def _memory_emerge(config: Config, args: argparse.Namespace) -> int:
    from bot.commands import emergence_text
    from bot.runtime import open_runtime

    async with open_runtime(config) as rt:
        await rt.core.agents.get(args.agent)
        outcome = await rt.extras["emergence"].emerge(args.agent)
        print(emergence_text(rt.core.prompts, outcome))
    return EXIT_RUNTIME if outcome.status == "failed" else EXIT_OK


async def _memory_summarize(config: Config, args: argparse.Namespace) -> int:
    from bot.runtime import open_runtime

    async with open_runtime(config) as rt:
        await rt.core.agents.get(args.agent)
        conversation = await rt.core.repos.conversations.get(args.conversation)
        if conversation is None or conversation.agent_id != args.agent:
            print(f"matebot: agent {args.agent} has no conversation {args.conversation}", file=sys.stderr)
            return EXIT_RUNTIME
        outcome = await rt.extras["worker"].summarize_now(args.agent, args.conversation)
        prompts = rt.core.prompts
        if outcome.status == "failed":
            print(prompts.text("summarize_failed", error=outcome.reason), file=sys.stderr)
            return EXIT_RUNTIME
        print(prompts.text("summarize_done", status=outcome.status, reason=outcome.reason))
    return EXIT_OK


_HANDLERS: dict[str, Callable[[Config, argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "check-config": _check_config,
    "backup": _backup,
    "memory show": _memory_show,
    "memory search": _memory_search,
    "memory export": _memory_export,
    "memory import": _memory_import,
    "memory enable": _memory_toggle,
    "memory disable": _memory_toggle,
    "conversations": _conversations,
    "run": _run,
    "chat": _chat,
    "memory emerge": _memory_emerge,
    "memory summarize": _memory_summarize,
}


if __name__ == "__main__":
    sys.exit(main())
