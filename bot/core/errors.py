"""The small tree of errors matebot raises on purpose."""

from __future__ import annotations

from typing import Any


class MateError(Exception):
    """Base of every error matebot raises deliberately."""


class ConfigError(MateError):
    """The configuration is invalid; the message is one line naming the key."""


class StorageError(MateError):
    """The database could not be opened or migrated."""


class VersionConflict(MateError):
    """A workspace file changed since the version the writer read."""

    def __init__(self, filename: str, expected: int, actual: int) -> None:
        super().__init__(f"{filename}: expected version {expected}, found {actual}")
        self.filename = filename
        self.expected = expected
        self.actual = actual


class WorkspaceError(MateError):
    """A workspace file operation was refused (bad name, too large, not found)."""


class MediaRefused(MateError):
    """A file or voice note the agent will not read; `key` and `params` name the polite answer in strings.yaml."""

    def __init__(self, key: str, **params: Any) -> None:
        super().__init__(key)
        self.key = key
        self.params = params


class LLMError(MateError):
    """The language model could not answer after the client's retries.

    `billed` is the usage the provider reported before the call failed (a stream that
    broke off after it started), so the cost is still recorded; an LLMResponse or None.
    """

    def __init__(self, message: str, *, billed: Any = None) -> None:
        super().__init__(message)
        self.billed = billed


class PromptTooLong(LLMError):
    """The provider rejected the request because the prompt exceeds its window."""


class RequestRejected(LLMError):
    """The provider refused the request as it was sent (a 4xx other than rate limits): another
    request may be accepted, this one will not be."""


class LLMBusy(LLMError):
    """No model call could start in time: every concurrency slot stayed taken by other answers."""


class UnknownAgent(MateError):
    """No agent with that id exists."""


class StreamBroken(LLMError):
    """The answer broke off after part of it was streamed to the user; `partial` is that part."""

    def __init__(self, message: str, partial: str, *, billed: Any = None) -> None:
        super().__init__(message, billed=billed)
        self.partial = partial
