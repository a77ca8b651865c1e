"""Where log lines go: the terminal, and for the daemon a rotated file (SPEC S20)."""

from __future__ import annotations

import logging
import logging.handlers
import sys
from typing import TextIO
from pathlib import Path

from bot.core.config import LogConfig
from bot.core.errors import ConfigError

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FILE_MAX_BYTES = 5 * 1024 * 1024
FILE_BACKUPS = 3
# Library request logs can carry URLs with bot tokens in them (Telegram puts it in the path).
_NOISY = ("httpx", "httpx2", "httpcore", "openai", "telegram", "discord", "apscheduler", "aiosqlite")


def _level(name: str) -> int:
    return int(logging.getLevelName(name.upper()))


def configure_terminal(level: str) -> None:
    """Before the configuration is read: everything at `level` to stderr."""
    _replace_handlers([_stream_handler(_level(level))], _level(level))


def configure_daemon(config: LogConfig, *, cli_level: str | None, console: bool) -> None:
    """The daemon's logging: the file gets the full log, the terminal stays quiet under the console.

    `cli_level` (--log-level or -v) wins over `mate.log.level`; without either the file logs
    info and the terminal info too, or warning only while the console chat owns the terminal.
    """
    chosen = cli_level or config.level
    file_level = _level(chosen or "info")
    terminal_level = _level(chosen) if chosen else (logging.WARNING if console else logging.INFO)
    handlers: list[logging.Handler] = [_stream_handler(terminal_level)]
    if config.file:
        path = Path(config.file)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            file_handler = _FileHandler(
                path, maxBytes=FILE_MAX_BYTES, backupCount=FILE_BACKUPS, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"mate.log.file: cannot write {path}: {exc.strerror or exc}") from None
        file_handler.setLevel(file_level)
        file_handler.setFormatter(logging.Formatter(FORMAT))
        handlers.append(file_handler)
    _replace_handlers(handlers, min(h.level for h in handlers))


class _OwnHandler:
    """Marks the handlers set up here, so a reconfiguration replaces only those."""


class _StreamHandler(logging.StreamHandler[TextIO], _OwnHandler):
    """Writes to whatever sys.stderr is at the time (it may be replaced after set-up)."""

    @property  # the setter ignores what it is given: the stream is always the current stderr
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


class _FileHandler(logging.handlers.RotatingFileHandler, _OwnHandler):
    pass


def _stream_handler(level: int) -> logging.Handler:
    handler = _StreamHandler()
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter(FORMAT))
    return handler


def _replace_handlers(handlers: list[logging.Handler], level: int) -> None:
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _OwnHandler)]:
        root.removeHandler(old)
        old.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
