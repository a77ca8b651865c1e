"""Command line: `matebot run|chat|check-config|memory ...` parsed and dispatched, with the exit codes of SPEC S16."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from bot.app.cli.check import check_config
from bot.app.cli.data import backup, migrate, restore
from bot.app.cli.exits import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from bot.app.cli.lists import conversations, people, tasks
from bot.app.cli.memory import (
    memory_emerge,
    memory_export,
    memory_import,
    memory_search,
    memory_show,
    memory_summarize,
    memory_toggle,
)
from bot.app.cli.parser import build_parser
from bot.app.cli.run import chat, run
from bot.app.log_setup import configure_daemon, configure_terminal
from bot.core.config import Config, load_config
from bot.core.errors import ConfigError, MateError
from bot.core.redaction import Redactor, config_secrets, install

log = logging.getLogger("bot")

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


_HANDLERS: dict[str, Callable[[Config, argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "check-config": check_config,
    "backup": backup,
    "restore": restore,
    "migrate": migrate,
    "memory show": memory_show,
    "memory search": memory_search,
    "memory export": memory_export,
    "memory import": memory_import,
    "memory enable": memory_toggle,
    "memory disable": memory_toggle,
    "conversations": conversations,
    "people": people,
    "tasks": tasks,
    "run": run,
    "chat": chat,
    "memory emerge": memory_emerge,
    "memory summarize": memory_summarize,
}


if __name__ == "__main__":
    sys.exit(main())
