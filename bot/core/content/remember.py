"""Whether a message asks to keep something: one reading for the memory worker and for the
reply's honesty check (SPEC S34), in every locale's words.

A request is a sentence that starts with a request phrase ("remember", "don't forget",
"记住"), perhaps after an opener ("please", "can you", "请", "帮我"). "I remember our trip",
"do you remember where I live?" and "remember when we…" are not requests; neither is a
pasted document, nor a request to keep a password, a code or a key (memory never keeps
secrets), nor a scheduled reminder's own turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bot.core.prompts import LOCALES, PromptLibrary

# Longer than this is a pasted text with "don't forget" somewhere in it, not a request.
MAX_REQUEST_CHARS = 600
_SENTENCES = re.compile(r"(?<=[.!?;])\s+|[。！？；\n]+")
_QUESTION_END = re.compile(r"[?？]\s*$")
# "Remember: X", "记住：X": the words after a colon that follows the request phrase (not the
# colon of "10:30" or "https://").
_AFTER_COLON = re.compile(r"^\S.{0,100}?(?::\s+|：\s*)(?P<what>\S.*)$", re.DOTALL)
# What an API key or a token looks like: a long run of letters and digits with both in it;
# a card or account number: 12 or more digits, spaced or not.
_KEY_SHAPE = re.compile(r"\b(?=[A-Za-z0-9_\-]*\d)(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{24,}\b")
_LONG_NUMBER = re.compile(r"(?:\d[ \-]?){12,}")
_PIN = re.compile(r"\b(?:pin|pw|pwd|code)\b\W{0,3}(?:is\W{0,3})?\d{3,}", re.IGNORECASE)


def _fold(text: str) -> str:
    return " ".join(text.casefold().replace("\u2019", "'").split())


def _starts_with(text: str, word: str) -> bool:
    """`text` starts with the word `word` ("remember" is not the start of "remembered"; a Chinese
    word needs no space after it)."""
    if not text.startswith(word):
        return False
    rest = text[len(word):]
    return not rest or not rest[0].isalnum() or not word[-1].isascii()


def scheduled_turn_heads() -> tuple[str, ...]:
    """How a scheduled task's own turn opens, in every locale (its text follows a group's "[name] ")."""
    return tuple(
        PromptLibrary(locale).render("tasks/reminder-turn", message="\x00", created_by="\x00", repeating=repeating)
        .partition("\x00")[0].strip() for locale in LOCALES for repeating in (False, True))


def _every_locale(key: str) -> list[str]:
    return [w for locale in LOCALES for w in PromptLibrary(locale).words(key)]


class RememberRequests:
    """Reads requests to remember. `keywords` (mate.memory.remember-keywords) count wherever
    they stand in a message."""

    def __init__(self, keywords: Sequence[str] = ()) -> None:
        def folded(key: str) -> tuple[str, ...]:
            return tuple(dict.fromkeys(_fold(w) for w in _every_locale(key) if w.strip()))

        self._requests = folded("remember_request_words")
        self._openers = tuple(sorted(folded("request_opener_words"), key=len, reverse=True))
        self._recalls = folded("recall_words")
        self._secrets = folded("secret_words")
        self._keywords = tuple(_fold(k) for k in keywords if k.strip())
        self._scheduled = scheduled_turn_heads()

    def asks(self, text: str) -> bool:
        """The message asks to keep something."""
        return self.request_in(text) is not None

    def request_in(self, text: str) -> str | None:
        """The sentence of `text` that asks to keep something (None: no request)."""
        if len(text) > MAX_REQUEST_CHARS or self.is_scheduled_turn(text) or self.is_secret(text):
            return None
        folded = _fold(text)
        if any(k in folded for k in self._keywords):
            return " ".join(text.split())
        for sentence in _SENTENCES.split(text):
            if self._is_request(sentence):
                return " ".join(sentence.split())
        return None

    def what(self, text: str) -> str | None:
        """What to keep of a request: the words after "remember:" or the request sentence."""
        sentence = self.request_in(text)
        if sentence is None:
            return None
        match = _AFTER_COLON.match(sentence)
        return (match.group("what") if match else sentence).strip()

    def is_secret(self, text: str) -> bool:
        """Names a password, a code or a key, or holds a key's or a card number's shape."""
        folded = _fold(text)
        return (any(w in folded for w in self._secrets) or _KEY_SHAPE.search(text) is not None
                or _LONG_NUMBER.search(text) is not None or _PIN.search(text) is not None)

    def is_scheduled_turn(self, text: str) -> bool:
        """A scheduled task's own turn (after a group's "[name] "): it asks for nothing."""
        return any(head in text[:200] for head in self._scheduled)

    def _is_request(self, sentence: str) -> bool:
        folded = _fold(sentence)
        opened = False
        while True:  # "can you please remember", "请帮我记住"
            opener = next((o for o in self._openers if _starts_with(folded, o)), None)
            if opener is None:
                break
            folded, opened = folded[len(opener):].lstrip(" ,，"), True
        if not any(_starts_with(folded, r) for r in self._requests) or any(folded.startswith(r) for r in self._recalls):
            return False
        # "remember: X?" asks nothing; "can you remember that X?" is a polite request.
        return opened or not _QUESTION_END.search(folded)
