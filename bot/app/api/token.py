"""The admin API's token: the configured one, or one generated on first start and kept (0600)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from bot.core.config import Config

TOKEN_FILE = "api-token"


def resolve_api_token(configured: str, data_dir: Path) -> str:
    """`configured` when set; else the token kept in `data_dir`/api-token, made on first use."""
    if configured:
        return configured
    path = data_dir / TOKEN_FILE
    try:
        kept = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        kept = ""
    if kept:
        os.chmod(path, 0o600)  # a copy restored from a backup may have lost its mode
        return kept
    data_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    # Created with its final mode: the token is never readable by others, not even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(token + "\n")
    os.chmod(path, 0o600)
    return token


def token_file(database: str | Path) -> Path:
    """Where the generated token is kept: data/api-token, beside the database."""
    return Path(database).parent / TOKEN_FILE


def token_whereabouts(config: Config) -> str:
    """Where an operator finds the token, for a line that must not contain it."""
    if config.mate.api.token.strip():
        return "mate.api.token in the configuration (MATE_API_TOKEN)"
    return f"in {token_file(config.mate.database.path).resolve()}"
