"""Where log lines go: a quiet terminal under the console chat, the full log in mate.log.file."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.core.config import LogConfig
from bot.core.errors import ConfigError
from bot.app.log_setup import configure_daemon
from bot.core.redaction import Redactor, install

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()  # the log files these tests opened
    root.setLevel(level)


def _emit() -> None:
    log = logging.getLogger("bot.test")
    log.debug("debug line")
    log.info("info line")
    log.warning("warning line")


def test_console_keeps_the_terminal_to_warnings_and_the_file_gets_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "logs" / "matebot.log"
    configure_daemon(LogConfig(file=str(path)), cli_level=None, console=True)
    _emit()
    terminal = capsys.readouterr().err
    assert "warning line" in terminal and "info line" not in terminal
    written = path.read_text(encoding="utf-8")
    assert "info line" in written and "warning line" in written and "debug line" not in written


def test_without_the_console_the_terminal_logs_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configure_daemon(LogConfig(file=""), cli_level=None, console=False)
    _emit()
    terminal = capsys.readouterr().err
    assert "info line" in terminal and "debug line" not in terminal
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("config_level, cli_level", [("debug", None), ("error", "debug")])
def test_the_level_is_chosen_by_the_cli_then_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config_level: str, cli_level: str | None,
) -> None:
    path = tmp_path / "matebot.log"
    configure_daemon(LogConfig(file=str(path), level=config_level), cli_level=cli_level,  # type: ignore[arg-type]
                     console=True)
    _emit()
    assert "debug line" in capsys.readouterr().err  # an explicit level applies to the terminal too
    assert "debug line" in path.read_text(encoding="utf-8")


def test_an_unwritable_log_file_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^mate\.log\.file: cannot write "):
        configure_daemon(LogConfig(file=str(blocker / "matebot.log")), cli_level=None, console=False)


def test_secrets_are_masked_in_the_file_too(tmp_path: Path) -> None:
    path = tmp_path / "matebot.log"
    configure_daemon(LogConfig(file=str(path)), cli_level=None, console=False)
    install(Redactor(["bot-token-123456"]))
    logging.getLogger("bot.test").warning("calling https://api.example/botbot-token-123456/getMe")
    assert "bot-token-123456" not in path.read_text(encoding="utf-8")
    assert "/bot***/getMe" in path.read_text(encoding="utf-8")


def test_matebot_chat_keeps_info_lines_off_the_prompt(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"mate:\n  timezone: UTC\n  database:\n    path: {tmp_path / 'mate.db'}\n  api:\n    enabled: false\n"
        f"  log:\n    file: {tmp_path / 'matebot.log'}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    done = subprocess.run([sys.executable, "-m", "bot", "chat", "--config", str(config)], input="hello\n",
                          capture_output=True, text=True, timeout=60, env={**env, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "(offline) hello" in done.stdout
    assert " INFO " not in done.stderr and "matebot: ready" in done.stderr
    assert " INFO bot.storage.database: database created" in (tmp_path / "matebot.log").read_text(encoding="utf-8")
