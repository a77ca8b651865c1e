"""What a person explicitly asked to be remembered, kept even when the model keeps nothing (SPEC S34).

A small model can answer an explicit "remember ..." with `should_update: false`. The request
is named in the extraction prompt, and when the answer still changes no long-term file, the
person's own words are added to MEMORY.md (or, when it is full, to the day's note).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.core.content.messages import decode_content, plain_text
from bot.core.records import MessageRecord
from memory.extraction.edits import without_placeholders
from memory.extraction.resolve import Plan

# What is kept of one request, at most: the person's words, not a whole pasted document.
MAX_REQUEST_CHARS = 300
_QUESTION_END = re.compile(r"[?？]\s*$")
# What an API key or a token looks like: a long run of letters, digits and -_ with both in it.
_KEY_SHAPE = re.compile(r"\b(?=[A-Za-z0-9_\-]*\d)(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{24,}\b")
# "Please remember this: <what>" — the words after the first colon are what to keep.
_AFTER_COLON = re.compile(r"^[^:：]{0,80}[:：]\s*(?P<what>\S.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class RememberRequest:
    """One message that asks to keep something: the words to keep, and who asked (in a group)."""

    text: str
    speaker: str = ""

    def listed(self) -> str:
        """The request as a bullet: who asked (in a group), and the words."""
        who = f"{self.speaker}: " if self.speaker else ""
        return f"- {who}{self.text}"

    def line(self, date: str) -> str:
        return f"{self.listed()} ({date})"


class RequestWords:
    """Whether a message asks to keep something: it holds a request's words ("please remember",
    "don't forget", "记住") or starts with a remember word ("Remember, I'm vegetarian"), and is no
    question. "I remember our trip" and "do you remember where I live?" are not requests, and
    neither is one to keep a secret: it is left to the model, which notes at most that it exists."""

    def __init__(self, request_words: Sequence[str], remember_words: Sequence[str],
                 secret_words: Sequence[str] = ()) -> None:
        self._requests = tuple(w.casefold() for w in request_words if w.strip())
        self._starts = tuple(w.casefold() for w in remember_words if w.strip())
        self._secrets = tuple(w.casefold() for w in secret_words if w.strip())

    def __call__(self, text: str) -> bool:
        folded = text.casefold().replace("\u2019", "'").strip()
        if not folded or _QUESTION_END.search(folded) or self.is_secret(text):
            return False
        return any(w in folded for w in self._requests) or folded.startswith(self._starts)

    def is_secret(self, text: str) -> bool:
        """Names a password, a code or a key, or holds a key's shape."""
        folded = text.casefold()
        return any(w in folded for w in self._secrets) or _KEY_SHAPE.search(text) is not None


def remember_requests(
    batch: Sequence[MessageRecord], asks_to_remember: Callable[[str], bool], *, group: bool,
) -> list[RememberRequest]:
    """The person's messages in `batch` that `asks_to_remember` takes for a request to keep something."""
    found: list[RememberRequest] = []
    for message in batch:
        if message.role != "user":
            continue
        text = " ".join(plain_text(decode_content(message.content, message.content_format)).split())
        speaker = (message.sender_name or message.sender_id or "") if group else ""
        if speaker and text.startswith(f"[{speaker}] "):  # a group row starts with who said it
            text = text[len(speaker) + 3:]
        if not asks_to_remember(text):
            continue
        match = _AFTER_COLON.match(text)
        what = (match.group("what") if match else text).strip()
        if len(what) > MAX_REQUEST_CHARS:
            what = what[:MAX_REQUEST_CHARS].rstrip() + "…"
        found.append(RememberRequest(what, speaker))
    return found


def keep_requests(
    plan: Plan, requests: Sequence[RememberRequest], *, memory_file: str, memory_text: str, budget: int,
    date: str, placeholders: frozenset[str], kept_files: Sequence[str],
) -> bool:
    """Adds the requests to `plan` when it changes none of `kept_files` (the long-term files);
    MEMORY.md when they fit its budget, else the daily entry. True when it added them."""
    if not requests or any(name in plan.contents for name in kept_files):
        return False
    lines = "\n".join(r.line(date) for r in requests)
    current = memory_text.rstrip()
    grown = without_placeholders(f"{current}\n{lines}\n" if current else f"{lines}\n", placeholders)
    if len(grown.strip()) <= budget:
        plan.contents[memory_file] = grown
    else:
        plan.daily_entry = "\n".join(part for part in (plan.daily_entry.strip(), lines) if part)
    plan.should_update = True
    plan.notes.append("kept what the person asked to remember, in their words")
    return True
