"""What a person explicitly asked to be remembered, kept even when the model keeps nothing (SPEC S34).

A small model can answer an explicit "remember ..." with `should_update: false`. The request
is named in the extraction prompt, and when the answer still keeps nothing of it, the
person's own words are added: in a direct chat to MEMORY.md (the day's note when it is
full); in a group to the day's note, since the group's MEMORY.md reaches every member's
replies and a member's words should not get there without the model's judgement.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.core.content.messages import decode_content, plain_text
from bot.core.content.remember import RememberRequests
from bot.core.records import MessageRecord
from memory.extraction.edits import without_placeholders
from memory.extraction.resolve import Plan

# What is kept of one request, at most: a sentence or two.
MAX_REQUEST_CHARS = 300
# The words that say what a request is about: numbers, longer words, Chinese characters.
_TOKENS = re.compile(r"\d+|[^\W\d_]{4,}|[\u3400-\u9fff]")


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

    def kept_in(self, text: str) -> bool:
        """Most of what the request is about appears in `text`."""
        tokens = {t.casefold() for t in _TOKENS.findall(self.text)}
        if not tokens:
            return self.text.casefold() in text.casefold()
        folded = text.casefold()
        return sum(t in folded for t in tokens) * 2 >= len(tokens)


def remember_requests(
    batch: Sequence[MessageRecord], requests: RememberRequests, *, group: bool,
) -> list[RememberRequest]:
    """The person's messages in `batch` that ask to keep something, with what to keep."""
    found: list[RememberRequest] = []
    for message in batch:
        if message.role != "user":
            continue
        text = " ".join(plain_text(decode_content(message.content, message.content_format)).split())
        speaker = (message.sender_name or message.sender_id or "") if group else ""
        if speaker and text.startswith(f"[{speaker}] "):  # a group row starts with who said it
            text = text[len(speaker) + 3:]
        what = requests.what(text)
        if what is None:
            continue
        if len(what) > MAX_REQUEST_CHARS:
            what = what[:MAX_REQUEST_CHARS].rstrip() + "…"
        found.append(RememberRequest(what, speaker))
    return found


def keep_requests(
    plan: Plan, requests: Sequence[RememberRequest], *, memory_file: str, files: Mapping[str, str], budget: int,
    date: str, placeholders: frozenset[str], group: bool,
) -> bool:
    """Adds to `plan` each request it keeps nothing of (in what it adds to any file, the daily
    entry included) and that MEMORY.md does not hold already: a direct chat's to MEMORY.md when it
    fits `budget`, else to the daily entry; a group's to the daily entry. True when it added any."""
    written = "\n".join(new for name, new in plan.contents.items() if new != files.get(name, ""))
    memory_text = plan.contents.get(memory_file, files.get(memory_file, ""))
    missing = [r for r in requests
               if not r.kept_in(f"{written}\n{plan.daily_entry}") and r.text not in memory_text]
    if not missing:
        return False
    lines = "\n".join(r.line(date) for r in missing)
    current = memory_text.rstrip()
    grown = without_placeholders(f"{current}\n{lines}\n" if current else f"{lines}\n", placeholders)
    if not group and len(grown.strip()) <= budget:
        plan.contents[memory_file] = grown
    else:
        plan.daily_entry = "\n".join(part for part in (plan.daily_entry.strip(), lines) if part)
    plan.should_update = True
    plan.notes.append("kept what the person asked to remember, in their words")
    return True
