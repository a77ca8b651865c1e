"""Secrets never reach a log line or an error text: configured secrets, URL credentials, API-key shapes."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from bot.core.config import Config

MASK = "***"
_MIN_SECRET = 6  # shorter values would mask ordinary words
_KEY_SHAPES = re.compile(r"sk-ant-[A-Za-z0-9_\-]{4,}|sk-[A-Za-z0-9]{20,}")
# A password may hold a "/" (a database URL's often does, unencoded).
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/@:]+(?::[^\s@]*)?@")
_QUERY_PASSWORD = re.compile(r"(?i)(?P<key>[?&](?:password|passwd|pwd|sslpassword)=)[^&\s#]*")


class Redactor:
    """Replaces every known secret, `sk-ant-...` shape and user:password@ in URLs with ***."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted({s.strip() for s in secrets if s and len(s.strip()) >= _MIN_SECRET}, key=len, reverse=True)
        self._secrets = re.compile("|".join(map(re.escape, values))) if values else None

    def __call__(self, text: str) -> str:
        if self._secrets is not None:
            text = self._secrets.sub(MASK, text)
        text = _KEY_SHAPES.sub(MASK, text)
        text = _QUERY_PASSWORD.sub(lambda m: f"{m.group('key')}{MASK}", text)
        return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)


def _credentials(url: str) -> tuple[str, str, str]:
    """("scheme://", "user:password" or "", the rest): the credentials end at the URL's last @,
    since a password may hold an @, a ? or a /."""
    head, sep, tail = url.partition("://")
    credentials, _, rest = tail.rpartition("@")
    return head + sep, credentials, rest


def url_passwords(url: str) -> list[str]:
    """The passwords a URL carries: after user: and in a password= parameter."""
    _, credentials, _ = _credentials(url)
    found = [credentials.split(":", 1)[1]] if ":" in credentials else []
    found += [m.group(0).split("=", 1)[1] for m in _QUERY_PASSWORD.finditer(url)]
    return [p for p in found if p]


def redacted(url: str) -> str:
    """The URL without its password (nor any parameter, where one may be), for messages and logs."""
    start, credentials, rest = _credentials(url)
    host = rest.split("?", 1)[0]
    user = credentials.split(":", 1)[0]
    return f"{start}{user}@{host}" if user else f"{start}{host}"


def config_secrets(config: Config) -> list[str]:
    """Every secret value the configuration holds (credentials inside URLs are masked by shape)."""
    mate = config.mate
    channels = mate.channels
    endpoints = [mate.media.transcription, mate.memory.embeddings]
    return [mate.llm.api_key, channels.telegram.token, channels.telegram.webhook.secret_token,
            channels.discord.token, mate.api.token,
            *(endpoint.api_key for endpoint in endpoints if endpoint is not None and not isinstance(endpoint, str)),
            *url_passwords(mate.storage.url)]


class RedactingFilter(logging.Filter):
    """On a handler: the record's message, arguments and traceback text, redacted."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: keep what there is, redacted
            message = f"{record.msg} {record.args}"
        record.msg, record.args = self._redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self._redact(record.stack_info)
        return True


def install(redact: Redactor, logger: logging.Logger | None = None) -> RedactingFilter:
    """Add the filter to every handler of `logger` (the root logger by default)."""
    target = logger or logging.getLogger()
    log_filter = RedactingFilter(redact)
    for handler in target.handlers:
        for old in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
            handler.removeFilter(old)
        handler.addFilter(log_filter)
    return log_filter
