"""HonestReplies: a reply never claims a remember, reminder or change that did not happen (SPEC S34)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from bot.core.content.remember import RememberRequests
from bot.core.prompts import LOCALES, PromptLibrary
from memory.workspace.tool import EDIT_TOOL, WRITE_TOOL

# The reminder tools' names, as bot/schedule/reminders/tool.py defines them (the conversation layer
# sits below schedule and may not import it; tests/conversation/test_no_false_claims.py checks them).
SCHEDULE_TOOL = "schedule_task"
CANCEL_TOOL = "cancel_task"

# The tools that act, by the kind of action they do.
_KIND_OF_TOOL = {WRITE_TOOL: "memory", EDIT_TOOL: "memory", SCHEDULE_TOOL: "remind", CANCEL_TOOL: "cancel"}
# What is left of a reply once its claiming sentences are taken out, at most, for it to go too
# ("Done!", "Got it,"): then the honest line replaces the reply instead of following it.
_ONLY_A_CLAIM = 12
_WORD = re.compile(r"\w", re.UNICODE)
# Where a sentence ends (its end and the space after stay with it): the pieces join back unchanged.
_SENTENCE_END = re.compile(r"(?<=[.!?])(?=\s+\S)|(?<=[。！？\n])(?=\s*\S)")


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One tool call of a turn: its name, and the error it gave ("" when it worked)."""

    name: str
    failed: bool
    error: str = ""

    @staticmethod
    def of(name: str, content: str, is_error: bool) -> ToolOutcome:
        if not is_error:
            return ToolOutcome(name, False)
        try:
            value = json.loads(content)
        except ValueError:
            value = None
        error = value.get("error") if isinstance(value, dict) else None
        return ToolOutcome(name, True, error if isinstance(error, str) and error else content)


def _fold(text: str) -> str:
    return text.casefold().replace("\u2019", "'")


def _words(key: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    # Every locale's words: a bilingual person writes "记住 ..." to an English-locale bot too.
    found = [w for locale in LOCALES for w in PromptLibrary(locale).words(key)]
    return tuple(dict.fromkeys(_fold(w) for w in (*found, *extra) if w.strip()))


class HonestReplies:
    """Reads what a person asked for and what the turn's tools did, and adds the plain line a
    reply needs when it claims an action that did not happen, or an action failed."""

    def __init__(self, prompts: PromptLibrary, remember_keywords: Sequence[str] = ()) -> None:
        self._prompts = prompts
        # The same reading the memory worker runs an explicit "remember" at once for.
        self._requests = RememberRequests(remember_keywords)
        self._remind = _words("remind_words")
        self._change = _words("change_words")
        self._claims = {"memory": _words("memory_claim_words"), "remind": _words("reminder_claim_words")}

    def asks_to_remember(self, text: str) -> bool:
        return self._requests.asks(text)

    def requested(self, text: str) -> frozenset[str]:
        """The actions `text` asks for: "remember", "remind", "change"."""
        folded = _fold(text)
        asked = {kind for kind, words in (("remind", self._remind), ("change", self._change))
                 if any(w in folded for w in words)}
        if self._requests.asks(text):
            asked.add("remember")
        return frozenset(asked)

    def amend(
        self, asked: str, reply: str, outcomes: Sequence[ToolOutcome], *, can_remind: bool,
        kept_later: bool,
    ) -> str:
        """`reply` with the lines it needs: an action that failed (the last call of its kind), or one
        the person asked for and the reply claims with no tool of its kind having worked.

        `can_remind`: the reminder tools serve this turn (not a scheduled run's own turn);
        `kept_later`: the memory worker saves this explicit "remember" from the conversation at once.
        """
        last: dict[str, ToolOutcome] = {}
        for outcome in outcomes:
            kind = _KIND_OF_TOOL.get(outcome.name)
            if kind is not None:
                last[kind] = outcome
        lines: list[str] = []
        claimed: list[str] = []
        requested = self.requested(asked)
        failed = {kind: outcome for kind, outcome in last.items() if outcome.failed}
        # A memory write the model tried on its own is no business of the person's, unless the
        # reply says it was done.
        if "memory" in failed and (requested & {"remember", "change"} or self._claims_in(reply, "memory")):
            lines.append(self._text("honest_memory_failed_later" if kept_later else "honest_memory_failed"))
            claimed.append("memory")
        if "remind" in failed:
            lines.append(self._text("honest_reminder_failed", reason=failed["remind"].error))
            claimed.append("remind")
        if "cancel" in failed:
            lines.append(self._text("honest_cancel_failed", reason=failed["cancel"].error))
        if "memory" not in last and requested & {"remember", "change"} and self._claims_in(reply, "memory"):
            key = "honest_not_changed"
            if "remember" in requested:
                key = "honest_not_saved_yet" if kept_later else "honest_not_saved"
            lines.append(self._text(key))
            claimed.append("memory")
        if can_remind and "remind" not in last and "remind" in requested and self._claims_in(reply, "remind"):
            lines.append(self._text("honest_reminder_missing"))
            claimed.append("remind")
        if not lines:
            return reply
        # The sentences that claim what did not happen go; the honest lines say what did.
        rest = self._without_claims(reply, claimed)
        if len(_WORD.findall(rest)) <= _ONLY_A_CLAIM:  # nothing left worth keeping ("Done!")
            return "\n".join(lines)
        return "\n\n".join([rest, "\n".join(lines)])

    def _text(self, key: str, **values: object) -> str:
        return self._prompts.text(key, **values)

    def _claims_in(self, reply: str, kind: str) -> bool:
        folded = _fold(reply)
        return any(word in folded for word in self._claims[kind])

    def _without_claims(self, reply: str, kinds: Sequence[str]) -> str:
        """`reply` less its sentences that claim an action of `kinds`."""
        words = [word for kind in kinds for word in self._claims[kind]]
        kept = [piece for piece in _SENTENCE_END.split(reply.strip())
                if not any(word in _fold(piece) for word in words)]
        return "".join(kept).strip()
