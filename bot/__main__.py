"""Command line: `matebot run|chat|check-config|memory ...` with the exit codes of SPEC S16."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bot.core.config import Config, load_config, masked_dump
from bot.core.errors import ConfigError, MateError
from bot.app.log_setup import configure_daemon, configure_terminal
from bot.core.redaction import Redactor, config_secrets, install

log = logging.getLogger("bot")

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"matebot: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


_ID = re.compile(r"[0-9]{1,18}")


def _whole_number(text: str) -> int:
    """An id or count as typed: digits only, small enough for the database (no traceback, no echo)."""
    if not _ID.fullmatch(text) or int(text) < 1:
        raise argparse.ArgumentTypeError("must be a whole number from 1 to 999999999999999999")
    return int(text)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("matebot")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


AGENT_HELP = "the agent's id (mate.agents; `matebot people` shows whose agent is whose)"


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
    parser.add_argument("--version", action="version", version=f"matebot {_version()}",
                        help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND",
                                     help="what to do; `matebot COMMAND --help` describes each")

    def command(owner: Any, name: str, summary: str, description: str = "") -> argparse.ArgumentParser:
        """A subcommand: `summary` in its parent's list, and opening (with `description`) its own --help."""
        text = f"{summary[0].upper()}{summary[1:]}." + (f" {description}" if description else "")
        made: argparse.ArgumentParser = owner.add_parser(name, parents=[common], help=summary, description=text)
        return made

    command(commands, "run", "run the daemon",
            "Starts every enabled channel, the memory worker, the scheduler and the web API; the console chat "
            "too when stdin is a terminal. Ctrl+C or SIGTERM stops it (a second Ctrl+C exits at once). "
            "It needs the tokens of the channels it starts; the other commands do not.")
    chat = command(commands, "chat", "console chat through the full pipeline",
                   "Talks to a running daemon through its API, or runs one (channels included) with the console open.")
    chat.add_argument("--agent", type=_whole_number, default=1, help=AGENT_HELP + " (default: 1)")
    command(commands, "check-config", "print the effective configuration",
            "Secrets are masked; the provider it resolves to is named.")
    backup = command(commands, "backup", "copy the database and media files into DIR",
                     "Safe while the daemon runs.")
    backup.add_argument("dir", type=Path, metavar="DIR",
                        help="the folder to write into (created if missing; media files already there are kept)")
    restore = command(commands, "restore", "put a backup back in place of the database (the daemon must be stopped)",
                      "The database it replaces is kept beside it.")
    restore.add_argument("backup", type=Path,
                         help="a file `matebot backup` wrote, or its folder (the newest one is taken)")
    memory = command(commands, "memory", "inspect and maintain memory",
                     "The memory files each agent keeps (MEMORY.md, PROFILE.md, daily notes...).")
    actions = memory.add_subparsers(dest="action", required=True, parser_class=_Parser, metavar="ACTION",
                                    help="what to do; `matebot memory ACTION --help` describes each")
    emerge = command(actions, "emerge", "consolidate daily notes now",
                     "Folds the recent daily notes into MEMORY.md, as the nightly run does.")
    emerge.add_argument("--agent", type=_whole_number, required=True, help=AGENT_HELP)
    summarize = command(actions, "summarize", "extract memory from a conversation now",
                        "Runs the extraction that follows a conversation, without waiting for its cool-down.")
    summarize.add_argument("--agent", type=_whole_number, required=True, help=AGENT_HELP)
    summarize.add_argument("--conversation", required=True,
                           help="the conversation's id (`matebot conversations` lists them)")
    show = command(actions, "show", "list files, or print one")
    show.add_argument("--agent", type=_whole_number, required=True, help=AGENT_HELP)
    show.add_argument("filename", nargs="?", help="the file to print (e.g. MEMORY.md); none: list them all")
    search = command(actions, "search", "search conversations and memory files")
    search.add_argument("--agent", type=_whole_number, required=True, help=AGENT_HELP)
    search.add_argument("--limit", type=_whole_number, default=5, help="most results to show (default: 5)")
    search.add_argument("--json", action="store_true", help="print the result as JSON")
    search.add_argument("query", nargs="+", help="the words to search for")
    for name, where in (("export", "into DIR, one file each"), ("import", "from DIR (files exported before)")):
        transfer = command(actions, name, f"{name} the workspace files", f"The agent's memory files {where}.")
        transfer.add_argument("--agent", type=_whole_number, required=True, help=AGENT_HELP)
        transfer.add_argument("dir", type=Path, metavar="DIR",
                              help="the folder to write into" if name == "export" else "the folder to read from")
    for name in ("enable", "disable"):
        toggle = command(actions, name, f"{name} a file's injection into the system prompt")
        toggle.add_argument("--agent", type=_whole_number, required=True, help=AGENT_HELP)
        toggle.add_argument("filename", help="the memory file (e.g. PROFILE.md)")
    conversations = command(commands, "conversations", "list conversation ids with their last activity")
    conversations.add_argument("--agent", type=_whole_number, help=AGENT_HELP + " (default: every agent)")
    command(commands, "people", "list the people the bot knows, their accounts and their agents")
    tasks = command(commands, "tasks", "list the reminders and scheduled tasks waiting in every chat")
    tasks.add_argument("--agent", type=_whole_number, help=AGENT_HELP + " (default: every agent)")
    return parser


PRIVATE_UMASK = 0o077  # what matebot writes holds conversations and tokens: the owner's alone


def main(argv: Sequence[str] | None = None) -> int:
    # Every file this process creates (database, WAL, log, token, backups, exports) is made
    # 0600 and every folder 0700; the umask is put back on return for callers in-process.
    previous = os.umask(PRIVATE_UMASK)
    os.umask(previous | PRIVATE_UMASK)
    try:
        return _main(argv)
    finally:
        os.umask(previous)


def _main(argv: Sequence[str] | None) -> int:
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
        from bot.app.daemon import console_wanted

        try:
            configure_daemon(config.mate.log, cli_level=cli_level,
                             console=args.command == "chat" or console_wanted(config))
        except ConfigError as exc:
            print(f"matebot: config error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        _keep_log_private(config.mate.log.file)
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
        print(redact(_one_line(f"matebot: {exc}")), file=sys.stderr)
        return EXIT_RUNTIME
    except OSError as exc:  # a folder or the database that cannot be read or written
        where = f" ({exc.filename})" if exc.filename else ""
        print(redact(f"matebot: {exc.strerror or exc}{where}"), file=sys.stderr)
        return EXIT_RUNTIME


def _one_line(text: str) -> str:
    """`text` with line breaks and other control characters escaped: an error stays one line even
    when it quotes bytes from a damaged file (SQLite names a malformed schema's garbage)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _keep_log_private(file: str) -> None:
    """A log file an older version made readable by others becomes the owner's (new ones are, by umask)."""
    if not file:
        return
    try:
        os.chmod(file, 0o600)
    except OSError as exc:  # not ours, or gone: the log still works
        log.debug("could not make %s private: %s", file, exc.strerror or exc)


async def _check_config(config: Config, args: argparse.Namespace) -> int:
    from bot.conversation.agents import configured_id_collision
    from bot.storage.agents import read_chat_bindings

    bindings = read_chat_bindings(config.mate.database.path)  # read-only; {} before the first start
    problem = configured_id_collision(config.mate, bindings)
    if problem:
        raise ConfigError(problem)
    # The redactor also masks credentials inside URLs (a base-url with user:password@).
    redact = Redactor(config_secrets(config))
    print(redact(yaml.safe_dump(masked_dump(config), sort_keys=False, allow_unicode=True)), end="")
    llm = config.mate.llm
    protocol = "anthropic" if llm.protocol == "anthropic" else "openai-compatible chat completions"
    resolved = f"{protocol}, model {llm.model}" if llm.uses_anthropic else "offline (canned replies, no model)"
    from bot.app.daemon import other_protocol_key

    mismatch = other_protocol_key(llm, os.environ)
    why = " (no API key)" if llm.provider == "auto" and not llm.uses_anthropic and mismatch is None else ""
    print(f"# provider {llm.provider} resolves to: {resolved}{why}")
    if mismatch is not None:
        found, wanted = mismatch
        print(f"# {found} is set, but mate.llm.api is {llm.api}: set mate.llm.api: {wanted} (or auto) to use it")
    missing = config.mate.channels.missing_token()
    if missing:  # not an error here: only `matebot run` starts the channels
        print(f"# warning: {missing}; `matebot run` stops at this until it is set")
    from bot.conversation.people import shared_owner_memory

    warning = shared_owner_memory(config.mate)
    if warning:
        print(f"# warning: {warning}")
    return EXIT_OK


async def _memory_show(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core

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

    from bot.app.core import open_core
    from bot.conversation.commands.handler import search_lines
    from memory.recall.search import MAX_LIMIT, MemorySearchService

    if not 1 <= args.limit <= MAX_LIMIT:
        print(f"matebot: --limit must be from 1 to {MAX_LIMIT}", file=sys.stderr)
        return EXIT_USAGE
    async with open_core(config) as core:
        await core.agents.get(args.agent)
        result = await MemorySearchService(core.repos.search).search(args.agent, " ".join(args.query), args.limit)
        print(json.dumps(result, ensure_ascii=False, indent=2) if args.json else search_lines(core.prompts, result))
    return EXIT_OK


async def _memory_export(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core
    from memory.workspace.transfer import export_workspace

    async with open_core(config) as core:
        await core.agents.get(args.agent)
        report = await export_workspace(core.workspace, args.agent, args.dir)
    print(f"exported {len(report.written)} files to {args.dir}")
    for name, why in report.refused:
        print(f"matebot: not exported {name}: {why}", file=sys.stderr)
    return EXIT_OK if not report.refused else EXIT_RUNTIME


async def _memory_import(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core
    from memory.workspace.transfer import import_workspace

    async with open_core(config) as core:
        await core.agents.get(args.agent)
        report = await import_workspace(core.workspace, args.agent, args.dir)
    flags = f", {len(report.flags_changed)} with new flags" if report.flags_changed else ""
    print(f"imported {len(report.written)} files, {len(report.unchanged)} unchanged{flags}")
    for name, why in report.refused:
        print(f"matebot: refused {name}: {why}", file=sys.stderr)
    return EXIT_OK if not report.refused else EXIT_RUNTIME


async def _memory_toggle(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core

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

    from bot.app.cli.backup import back_up

    try:
        report = await asyncio.to_thread(back_up, Path(config.mate.database.path), args.dir)
    except (OSError, sqlite3.Error) as exc:
        print(f"matebot: backup failed: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    print(f"database copied to {report.database}; {report.media_copied} new media files in {args.dir / 'media'}")
    return EXIT_OK


async def _restore(config: Config, args: argparse.Namespace) -> int:
    import sqlite3

    from bot.app.cli.backup import restore

    database = Path(config.mate.database.path)
    try:
        report = await asyncio.to_thread(restore, database, args.backup)
    except (MateError, sqlite3.Error) as exc:
        print(f"matebot: nothing restored: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"matebot: nothing restored: {exc.strerror or exc}{where}", file=sys.stderr)
        return EXIT_RUNTIME
    media = f", {report.media_copied} media files added" if report.media_copied else ""
    kept = (f"the previous files are kept as {', '.join(str(p) for p in report.set_aside)}"
            if report.set_aside else "there was no database before")
    print(f"restored {report.database} from {report.source} (schema version {report.schema_version}, "
          f"integrity ok{media}); {kept}")
    if report.media_error:
        print(f"matebot: the database is restored, but not every media file was copied: {report.media_error}",
              file=sys.stderr)
        return EXIT_RUNTIME
    return EXIT_OK


async def _conversations(config: Config, args: argparse.Namespace) -> int:
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


async def _people(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core
    from bot.storage.people import OWNER_PERSON_ID

    async with open_core(config) as core:  # opening writes the config's links, as the daemon's start does
        listed = await core.people.list()
    for person in listed:
        agent = f"agent {person.agent_id}" if person.agent_id is not None else "no agent yet"
        role = "owner" if person.id == OWNER_PERSON_ID else "person"
        print(f"{person.id}\t{person.name}\t{role}\t{agent}\t{' '.join(person.accounts) or '-'}")
    return EXIT_OK


async def _tasks(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core
    from bot.schedule.reminders.service import TaskService

    async with open_core(config) as core:
        if args.agent is not None:
            await core.agents.get(args.agent)
        service = TaskService(config.mate.tasks, config.mate.timezone, core.repos.tasks, core.access, core.prompts)
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


async def _run(config: Config, args: argparse.Namespace) -> int:
    from bot.app.daemon import run_daemon

    return await run_daemon(config)


async def _chat(config: Config, args: argparse.Namespace) -> int:
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
    return await run_daemon(_console_routed_to(config, args.agent), console=True,
                            exit_when_console_closes=True)


def _console_routed_to(config: Config, agent_id: int) -> Config:
    """The same config with console chats routed to `agent_id` first."""
    from bot.core.config import RouteRule

    mate = config.mate
    routing = (RouteRule(channel="console", chat="*", agent=agent_id), *mate.routing)
    return config.model_copy(update={"mate": mate.model_copy(update={"routing": routing})})


async def _memory_emerge(config: Config, args: argparse.Namespace) -> int:
    from bot.conversation.commands.handler import emergence_text
    from bot.app.runtime import open_runtime

    answer = await _ask_daemon(config, f"/api/v1/memory/{args.agent}/emergence")
    if answer is not None:
        from bot.core.prompts import PromptLibrary

        print(emergence_text(PromptLibrary(config.mate.locale), _Outcome.of(answer)))
        return EXIT_OK
    async with open_runtime(config) as rt:
        await rt.core.agents.get(args.agent)
        assert rt.memory_services is not None  # open_runtime builds them unless told not to
        outcome = await rt.memory_services.emergence.emerge(args.agent)
        print(emergence_text(rt.core.prompts, outcome))
    return EXIT_RUNTIME if outcome.status == "failed" else EXIT_OK


async def _memory_summarize(config: Config, args: argparse.Namespace) -> int:
    from urllib.parse import quote

    from bot.app.runtime import open_runtime

    answer = await _ask_daemon(config, f"/api/v1/memory/{args.agent}/summarize/{quote(args.conversation, safe='')}")
    if answer is not None:
        from bot.core.prompts import PromptLibrary

        outcome = _Outcome.of(answer)
        print(PromptLibrary(config.mate.locale).text("summarize_done", status=outcome.status, reason=outcome.reason))
        return EXIT_OK
    async with open_runtime(config) as rt:
        await rt.core.agents.get(args.agent)
        conversation = await rt.core.repos.conversations.get(args.conversation)
        if conversation is None or conversation.agent_id != args.agent:
            print(f"matebot: agent {args.agent} has no conversation {args.conversation}", file=sys.stderr)
            return EXIT_RUNTIME
        assert rt.memory_services is not None
        analysed = await rt.memory_services.worker.summarize_now(args.agent, args.conversation)
        prompts = rt.core.prompts
        if analysed.status == "failed":
            print(prompts.text("summarize_failed", error=analysed.reason), file=sys.stderr)
            return EXIT_RUNTIME
        print(prompts.text("summarize_done", status=analysed.status, reason=analysed.reason))
    return EXIT_OK


@dataclass(frozen=True, slots=True)
class _Outcome:
    """A memory run's outcome as the daemon's API reports it."""

    status: str
    updated: bool
    reason: str

    @classmethod
    def of(cls, data: dict[str, Any]) -> _Outcome:
        return cls(str(data.get("status", "")), bool(data.get("updated")), str(data.get("reason") or ""))


async def _ask_daemon(config: Config, path: str) -> dict[str, Any] | None:
    """Memory work for a database a running daemon holds is done by that daemon, through its API.

    Two processes must not run memory work on one database at once, and this command may
    not have the daemon's model (its API key lives in the daemon's environment): run here,
    it would report success having asked no model. None: no daemon runs, do it here."""
    from bot.app.cli.chat_client import api_token, daemon_running

    if not daemon_running(config):
        return None
    database = config.mate.database.path
    api = config.mate.api
    if not api.enabled:
        if config.mate.llm.uses_anthropic:
            return None  # this command has a model of its own: as before, it runs here
        raise MateError(f"a matebot daemon is running on {database} with its API off (mate.api.enabled), "
                        f"and this command has no model (no API key here); run it with the daemon's "
                        f"ANTHROPIC_API_KEY, turn the API on, or use /memory in a chat")
    import aiohttp

    host = "127.0.0.1" if api.host in ("0.0.0.0", "::", "") else api.host
    netloc = f"[{host}]" if ":" in host else host
    print(f"matebot: a daemon is running on {database}: asking it ({netloc}:{api.port})", file=sys.stderr)
    # No total limit: a consolidation by a slow model takes minutes; the daemon bounds it.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    headers = {"Authorization": f"Bearer {api_token(config)}"}
    try:
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as http:
            async with http.post(f"http://{netloc}:{api.port}{path}") as response:
                body = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise MateError(f"a matebot daemon is running on {database} but its API at {netloc}:{api.port} "
                        f"did not answer ({type(exc).__name__})") from None
    if response.status != 200 or not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        detail = body.get("msg") if isinstance(body, dict) else None
        raise MateError(f"the running matebot refused: HTTP {response.status} {detail or response.reason}")
    data: dict[str, Any] = body["data"]
    return data


_HANDLERS: dict[str, Callable[[Config, argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "check-config": _check_config,
    "backup": _backup,
    "restore": _restore,
    "memory show": _memory_show,
    "memory search": _memory_search,
    "memory export": _memory_export,
    "memory import": _memory_import,
    "memory enable": _memory_toggle,
    "memory disable": _memory_toggle,
    "conversations": _conversations,
    "people": _people,
    "tasks": _tasks,
    "run": _run,
    "chat": _chat,
    "memory emerge": _memory_emerge,
    "memory summarize": _memory_summarize,
}


if __name__ == "__main__":
    sys.exit(main())
