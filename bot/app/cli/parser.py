"""Parses the command line: every verb, its arguments and their help texts."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from bot.app.cli.exits import EXIT_USAGE


_ID = re.compile(r"[0-9]{1,18}")
AGENT_HELP = "the agent's id (mate.agents; `matebot people` shows whose agent is whose)"


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"matebot: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def whole_number(text: str) -> int:
    """An id or count as typed: digits only, small enough for the database (no traceback, no echo)."""
    if not _ID.fullmatch(text) or int(text) < 1:
        raise argparse.ArgumentTypeError("must be a whole number from 1 to 999999999999999999")
    return int(text)


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("matebot")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    common = Parser(add_help=False)
    # SUPPRESS: the option may stand before or after the command without one erasing the other.
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help="config file (default: $MATE_CONFIG or ./config.yaml)")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug logging (the same as --log-level debug)")
    common.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=argparse.SUPPRESS,
                        help="log level (default: mate.log.level, else info)")
    parser = Parser(prog="matebot", description="Self-hosted chat assistant with durable memory.",
                     parents=[common])
    parser.add_argument("--version", action="version", version=f"matebot {version()}",
                        help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND",
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
    chat.add_argument("--agent", type=whole_number, default=1, help=AGENT_HELP + " (default: 1)")
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
    migrate = command(commands, "migrate", "copy the SQLite database into an empty PostgreSQL database",
                      "Every table is copied with its ids and the counts are checked; the search index is rebuilt "
                      "there. Stop the daemon first; afterwards set mate.storage.url to the URL.")
    migrate.add_argument("--to", required=True, metavar="URL",
                         help="the PostgreSQL database, e.g. postgresql://matebot:PASSWORD@localhost/matebot")
    memory = command(commands, "memory", "inspect and maintain memory",
                     "The memory files each agent keeps (MEMORY.md, PROFILE.md, daily notes...).")
    actions = memory.add_subparsers(dest="action", required=True, parser_class=Parser, metavar="ACTION",
                                    help="what to do; `matebot memory ACTION --help` describes each")
    emerge = command(actions, "emerge", "consolidate daily notes now",
                     "Folds the recent daily notes into MEMORY.md, as the nightly run does.")
    emerge.add_argument("--agent", type=whole_number, required=True, help=AGENT_HELP)
    summarize = command(actions, "summarize", "extract memory from a conversation now",
                        "Runs the extraction that follows a conversation, without waiting for its cool-down.")
    summarize.add_argument("--agent", type=whole_number, required=True, help=AGENT_HELP)
    summarize.add_argument("--conversation", required=True,
                           help="the conversation's id (`matebot conversations` lists them)")
    show = command(actions, "show", "list files, or print one")
    show.add_argument("--agent", type=whole_number, required=True, help=AGENT_HELP)
    show.add_argument("filename", nargs="?", help="the file to print (e.g. MEMORY.md); none: list them all")
    search = command(actions, "search", "search conversations and memory files")
    search.add_argument("--agent", type=whole_number, required=True, help=AGENT_HELP)
    search.add_argument("--limit", type=whole_number, default=5, help="most results to show (default: 5)")
    search.add_argument("--json", action="store_true", help="print the result as JSON")
    search.add_argument("query", nargs="+", help="the words to search for")
    for name, where in (("export", "into DIR, one file each"), ("import", "from DIR (files exported before)")):
        transfer = command(actions, name, f"{name} the workspace files", f"The agent's memory files {where}.")
        transfer.add_argument("--agent", type=whole_number, required=True, help=AGENT_HELP)
        transfer.add_argument("dir", type=Path, metavar="DIR",
                              help="the folder to write into" if name == "export" else "the folder to read from")
    for name in ("enable", "disable"):
        toggle = command(actions, name, f"{name} a file's injection into the system prompt")
        toggle.add_argument("--agent", type=whole_number, required=True, help=AGENT_HELP)
        toggle.add_argument("filename", help="the memory file (e.g. PROFILE.md)")
    conversations = command(commands, "conversations", "list conversation ids with their last activity")
    conversations.add_argument("--agent", type=whole_number, help=AGENT_HELP + " (default: every agent)")
    command(commands, "people", "list the people the bot knows, their accounts and their agents")
    tasks = command(commands, "tasks", "list the reminders and scheduled tasks waiting in every chat")
    tasks.add_argument("--agent", type=whole_number, help=AGENT_HELP + " (default: every agent)")
    return parser
