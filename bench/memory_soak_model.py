"""The memory soak's scripted model: answers extraction and emergence like a careful model, within max_tokens."""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from bench.memory_soak_facts import START, Fact
from bot.llm import LLMRequest, LLMResponse

# The scripted model's sense of size, as shares of a file's budget.
LARGE_SHARE = 0.30  # from here on it may answer with edits instead of the whole file
CONDENSE_AT = 0.85  # an update that would pass this makes it drop the oldest bullets ...
CONDENSE_TO = 0.65  # ... down to this
SHORTEN_TO = 0.50  # asked again for a shorter version
EMERGE_AT = 0.70  # emergence rewrites MEMORY.md only once it is this full ...
EMERGE_TO = 0.60  # ... and condenses it to this
EDITS_SHARE = 0.5  # of the replies about a large file
UPDATE_EDIT_SHARE = 0.3  # of edits replies that also update one existing line

_CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef]")
_PLACEHOLDER = re.compile(r"^_.*_$")
_EMPTY = ("(empty)", "（空）")


# -- tokens as the real API counts them (roughly) ---------------------------------------


def char_tokens(ch: str) -> float:
    """A CJK character is about one token; other text about four characters per token."""
    return 1.0 if _CJK.match(ch) else 0.25


def estimate_tokens(text: str) -> int:
    return math.ceil(sum(char_tokens(ch) for ch in text))


def cut_to_tokens(text: str, max_tokens: int) -> tuple[str, bool]:
    """`text` cut where it passes `max_tokens`, as the API cuts a reply; (text, was_cut)."""
    used = 0.0
    for index, ch in enumerate(text):
        used += char_tokens(ch)
        if used > max_tokens:
            return text[:index], True
    return text, False


# -- the simulated clock -----------------------------------------------------------------


@dataclass(slots=True)
class SimClock:
    """The services' clock: a moment the bench moves forward itself."""

    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def at(self, day: int, hour: float) -> None:
        self.now = START + timedelta(days=day, hours=hour)

    @property
    def day(self) -> int:
        return (self.now - START).days


# -- the scripted memory model -----------------------------------------------------------


def _between(text: str, tag: str) -> str:
    """The text inside the first <tag>...</tag>, with the template's placeholder read as empty."""
    start = text.find(f"<{tag}>")
    end = text.find(f"</{tag}>", start + 1)
    if start == -1 or end == -1:
        return ""
    inner = text[start + len(tag) + 2:end].strip()
    return "" if inner in _EMPTY else inner


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")


def _was_cut_off(texts: list[str]) -> bool:
    """Whether a follow-up turn says the previous answer was cut off (not that it was too long).

    The previous answer, when it is sent back, is not valid JSON; else the follow-up says so
    in words (the cut-off prompts of both locales).
    """
    if len(texts) < 2:
        return False
    if len(texts) >= 3:
        try:
            json.loads(texts[-2])
        except ValueError:
            return True
    follow_up = texts[-1].lower()
    return any(words in follow_up for words in ("cut off", "max_tokens", "截断"))


def is_bullet(line: str) -> bool:
    return line.startswith("- ")


def _keep(lines: list[str]) -> list[str]:
    """What a model keeps of a file it rewrites: everything but the seed's placeholder line."""
    return [line for line in lines if line.strip() and not _PLACEHOLDER.match(line.strip())]


def _drop_oldest(lines: list[str], target: int) -> list[str]:
    """Drop bullets from the top (oldest first, since new ones are appended) until `target` chars."""
    kept = list(lines)
    size = len("\n".join(kept))
    index = 0
    while size > target and index < len(kept):
        if is_bullet(kept[index]):
            size -= len(kept[index]) + 1
            del kept[index]
        else:
            index += 1  # headings stay
    return kept


# One extraction request: (day from START, characters, tokens, characters of PROFILE.md +
# MEMORY.md as shown in the prompt).
Sample = tuple[int, int, int, int]


@dataclass(slots=True)
class ModelStats:
    memory_requests: list[Sample] = field(default_factory=list)
    replies: Counter[str] = field(default_factory=Counter)
    edits_replies: int = 0
    cut_replies: int = 0
    follow_ups: int = 0


class SoakModel:
    """An in-process LLMClient that answers memory and emergence requests like a careful model."""

    def __init__(self, facts: dict[str, Fact], *, profile_max: int, memory_max: int, labels: Sequence[str],
                 clock: SimClock, rng: random.Random) -> None:
        self._facts = facts  # user message text -> the fact it carries
        self._budgets = {"profile": profile_max, "memory": memory_max}
        self._labels = tuple(labels)
        self._clock = clock
        self._rng = rng
        self.stats = ModelStats()

    async def complete(self, request: LLMRequest, on_text: Any = None) -> LLMResponse:
        texts = [_text_of(m) for m in request.messages]
        if request.purpose == "memory":
            chars = len(request.system) + sum(len(t) for t in texts)
            tokens = estimate_tokens(request.system) + sum(estimate_tokens(t) for t in texts)
            files = len(_between(texts[0], "profile")) + len(_between(texts[0], "memory"))
            self.stats.memory_requests.append((self._clock.day, chars, tokens, files))
            reply = self._extraction(texts)
        elif request.purpose == "emergence":
            reply = self._emergence(texts)
        else:  # the bench calls nothing else; answer like a chat model anyway
            return self._respond(request, "OK.")
        if len(texts) > 1:
            self.stats.follow_ups += 1
        return self._respond(request, json.dumps(reply, ensure_ascii=False))

    def _respond(self, request: LLMRequest, text: str) -> LLMResponse:
        """The reply as the real API returns it: cut at max_tokens, with the stop reason saying so."""
        sent, cut = cut_to_tokens(text, request.max_tokens)
        self.stats.replies[request.purpose] += 1
        self.stats.cut_replies += cut
        return LLMResponse(text=sent, content=[{"type": "text", "text": sent}],
                           stop_reason="max_tokens" if cut else "end_turn",
                           input_tokens=sum(estimate_tokens(_text_of(m)) for m in request.messages),
                           output_tokens=estimate_tokens(sent), model=request.model)

    # -- extraction (S6 + the S19 edits form) ------------------------------------------

    def _new_facts(self, transcript: str) -> list[Fact]:
        found = []
        for line in transcript.splitlines():
            text = next((line[len(label):] for label in self._labels if line.startswith(label)), None)
            fact = self._facts.get(text.strip()) if text is not None else None
            if fact is not None:
                found.append(fact)
        return found

    def _extraction(self, texts: list[str]) -> dict[str, Any]:
        prompt = texts[0]
        asked_for_edits = _was_cut_off(texts)  # the S19 retry after a cut-off reply
        shorten = len(texts) > 1 and not asked_for_edits  # the S7 "over budget, shorter please"
        facts = self._new_facts(_between(prompt, "transcript"))
        if not facts:
            return {"should_update": False, "reason": "small talk only", "daily_entry": "",
                    "memory_update": "", "profile_update": ""}
        reply: dict[str, Any] = {
            "should_update": True,
            "reason": f"{len(facts)} new facts worth keeping",
            "daily_entry": "\n".join(f"- {f.text}" for f in facts),
        }
        edits_turn = asked_for_edits or self._rng.random() < EDITS_SHARE
        for name in ("profile", "memory"):
            new_lines = [f"- {self._today()}: {f.text}" for f in facts if f.kind == name]
            full, edits = self._file_change(name, _between(prompt, name), new_lines, edits_turn,
                                            asked_for_edits, shorten)
            reply[f"{name}_update"] = full
            if edits:
                reply[f"{name}_edits"] = edits
        if any(f"{name}_edits" in reply for name in ("profile", "memory")):
            self.stats.edits_replies += 1
        return reply

    def _today(self) -> str:
        """The date a careful model puts on a durable line (the prompt states it; so does the clock)."""
        return self._clock.now.date().isoformat()

    def _file_change(self, name: str, current: str, new_lines: list[str], edits_turn: bool,
                     asked_for_edits: bool, shorten: bool) -> tuple[str, list[dict[str, str]]]:
        """(full replacement, edits) for one file; ("", []) leaves it unchanged."""
        if not new_lines:  # nothing new for this file (asked to shorten, the other one was meant)
            return "", []
        budget = self._budgets[name]
        grown = len(current) + sum(len(line) + 1 for line in new_lines)
        target = int(budget * (SHORTEN_TO if shorten else CONDENSE_TO))
        condense = shorten or grown > budget * CONDENSE_AT
        large = len(current) >= budget * LARGE_SHARE
        if current and (asked_for_edits or (large and edits_turn)):
            return "", self._edits(current, new_lines, grown - target if condense else 0)
        lines = _keep(current.splitlines()) + new_lines
        if condense:
            lines = _drop_oldest(lines, target)
        return "\n".join(lines), []

    def _edits(self, current: str, new_lines: list[str], to_remove: int) -> list[dict[str, str]]:
        """Appends for the new lines; maybe one exact-line update; removals of the oldest bullets.

        Every `old` is a whole line found exactly once (with its line break for removals), as a
        careful model copies it: an edit that fails is then the code's failure, not the model's.
        """
        edits: list[dict[str, str]] = [{"append": line} for line in new_lines]
        bullets = [line for line in current.splitlines() if is_bullet(line) and current.count(line) == 1]
        removed: set[str] = set()
        for line in bullets:  # oldest first
            if to_remove <= 0:
                break
            if current.count(line + "\n") == 1:
                edits.append({"old": line + "\n", "new": ""})
                removed.add(line)
                to_remove -= len(line) + 1
        candidates = [line for line in bullets if line not in removed and "✓" not in line]
        if candidates and self._rng.random() < UPDATE_EDIT_SHARE:
            line = self._rng.choice(candidates)
            edits.append({"old": line, "new": f"{line} ✓ {self._today()}"})
        return edits

    # -- emergence (S8) ------------------------------------------------------------------

    def _emergence(self, texts: list[str]) -> dict[str, Any]:
        memory = _between(texts[0], "memory")
        budget = self._budgets["memory"]
        cut_off = _was_cut_off(texts)
        if len(texts) == 1 and len(memory) < budget * EMERGE_AT:
            return {"should_update": False, "reason": "MEMORY.md already reflects the notes", "memory_content": ""}
        shorten = len(texts) > 1 and not cut_off
        target = int(budget * (SHORTEN_TO if shorten else EMERGE_TO))
        reason = "condensed the older points"
        if cut_off:  # asked to answer shorter: the same condensation as deletions
            self.stats.edits_replies += 1
            return {"should_update": True, "reason": reason, "memory_content": "",
                    "memory_edits": self._edits(memory, [], len(memory) - target)}
        content = "\n".join(_drop_oldest(_keep(memory.splitlines()), target))
        return {"should_update": True, "reason": reason, "memory_content": content}
