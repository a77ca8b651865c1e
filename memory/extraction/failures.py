"""How one extraction attempt can fail: worth another try (with what to tell the model), an
answer that gave nothing to write, or an answer cut off at max_tokens."""

from __future__ import annotations

from memory.extraction.corrections import Correction
from memory.extraction.json_reply import InvalidJsonReply


class RetryableFailure(Exception):
    """One attempt failed in a way worth trying again (bad JSON, LLM error, repeated conflict)."""

    def __init__(self, message: str, correction: Correction | None = None) -> None:
        super().__init__(message)
        self.correction = correction  # what the next try tells the model, when its answer was the trouble


class UnusableReply(InvalidJsonReply):
    """A reply that gave nothing to write (not JSON, a field malformed, every change rejected)."""

    def __init__(self, kind: str, message: str, correction: Correction) -> None:
        super().__init__(message)
        self.kind = kind
        self.correction = correction


def is_retryable(exc: Exception) -> bool:
    return isinstance(exc, RetryableFailure)


class CutOff(Exception):
    """The model stopped at max_tokens: the reply is incomplete and never parsed."""

    def __init__(self, message: str, reply: str) -> None:
        super().__init__(message)
        self.reply = reply
