"""A memory reply resolved against the files it may change: each file's new text, and the parts left out (SPEC S19, S34)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory.extraction.edits import (
    EditNotApplicable,
    FileEdit,
    Rejection,
    apply_each,
    is_example_filler,
    without_placeholders,
)


@dataclass(frozen=True, slots=True)
class Target:
    """A budgeted file and the reply fields that may change it (under `key` for a member)."""
    filename: str
    replacement: str
    edits: str
    budget: int
    key: str | None = None
    title: str = ""  # a member's profile starts with "# <name>"

    def pick(self, reply: dict[str, Any]) -> tuple[str, tuple[FileEdit, ...]]:
        """(replacement, edits) the reply gives this file."""
        if self.key is None:
            return reply[self.replacement], reply[self.edits]
        return reply[self.replacement].get(self.key, ""), reply[self.edits].get(self.key, ())

    def field(self, name: str) -> str:
        """How the reply names this file's field: memory_edits, people_edits.P2."""
        return name if self.key is None else f"{name}.{self.key}"

    def current(self, files: Mapping[str, str]) -> str:
        """The file's text before the reply; a member's profile not yet written starts with its title."""
        return files.get(self.filename, "") or (f"{self.title}\n" if self.title else "")


@dataclass(slots=True)
class Plan:
    """What one reply asks to write, resolved against the files as read before the call."""
    should_update: bool
    reason: str
    contents: dict[str, str]  # PROFILE.md / MEMORY.md: the whole new text, only when it changes
    daily_entry: str
    problems: list[str] = field(default_factory=list)  # the run fails with these (files not written)
    notes: list[str] = field(default_factory=list)  # said in the run's reason (a daily entry cut)
    rejected: list[Rejection] = field(default_factory=list)  # parts left out (an edit that misses); the rest is kept


class ReplyResolver:
    """Turns a parsed reply into a Plan; `placeholders` are the seeds' lines the first fact replaces."""

    def __init__(self, placeholders: frozenset[str]) -> None:
        self._placeholders = placeholders

    def resolve(self, targets: Sequence[Target], files: Mapping[str, str], reply: dict[str, Any],
                stale: set[str]) -> Plan:
        """Replacement and edits -> each file's new text; the parts that miss are rejected alone.

        `stale`: files the prompt showed in an older copy (the chat's prefix). EditNotApplicable
        when one of them was replaced whole, or an edit of it missed (the answer would drop or
        miss what changed since).
        """
        reason = reply["reason"].strip() or ("updated" if reply["should_update"] else "nothing worth keeping")
        plan = Plan(reply["should_update"], reason, {}, reply["daily_entry"].strip() if reply["should_update"] else "")
        if not plan.should_update:
            return plan
        if is_example_filler(plan.daily_entry):
            plan.rejected.append(Rejection("daily_entry", "", "example", plan.daily_entry))
            plan.daily_entry = ""
        for target in targets:
            current = target.current(files)
            replacement, edits = target.pick(reply)
            if replacement.strip() and target.filename in stale:
                raise EditNotApplicable(f"{target.filename}: replaced whole from a copy older than the file")
            new, rejected = self._change(target, current, replacement, edits)
            if target.filename in stale and any(r.why != "example" for r in rejected):
                raise EditNotApplicable("; ".join(str(r) for r in rejected))
            plan.rejected += rejected
            if new.strip() != current.strip():
                plan.contents[target.filename] = new
        return plan

    def take_corrections(self, targets: Sequence[Target], files: Mapping[str, str], plan: Plan,
                         reply: dict[str, Any]) -> None:
        """From the answer to a correction, the parts the first answer got wrong: the corrected edits go
        on top of the first answer's valid ones, which stay whatever the second answer says."""
        if not plan.rejected or not reply["should_update"]:
            return
        retried = {r.filename for r in plan.rejected}
        remaining: list[Rejection] = []
        if any(r.where == "daily_entry" for r in plan.rejected):
            entry = reply["daily_entry"].strip()
            if entry and not is_example_filler(entry):
                plan.daily_entry = entry
            else:
                remaining += [r for r in plan.rejected if r.where == "daily_entry"]
        for target in targets:
            if target.filename not in retried:
                continue
            current = target.current(files)
            replacement, edits = target.pick(reply)
            if target.filename in plan.contents:
                replacement = ""  # written from the file as first shown: it would undo the edits kept
            if not replacement.strip() and not edits:
                remaining += [r for r in plan.rejected if r.filename == target.filename]
                continue
            new, rejected = self._change(target, plan.contents.get(target.filename, current), replacement, edits,
                                         again=True)
            remaining += rejected
            if new.strip() != current.strip():
                plan.contents[target.filename] = new
        plan.rejected = remaining

    def _change(self, target: Target, base: str, replacement: str, edits: Sequence[FileEdit], *,
                again: bool = False) -> tuple[str, list[Rejection]]:
        """One file's text after a reply's replacement and edits (`base` when it gives neither).

        Edits beside a replacement are applied to the replacement. `again`: the edits answer a
        correction and go on top of what was applied already, so one given twice is not applied twice.
        """
        rejected: list[Rejection] = []
        if is_example_filler(replacement):
            rejected.append(Rejection(target.field(target.replacement), target.filename, "example", replacement.strip()))
            replacement = ""
        if replacement.strip():
            applied = apply_each(replacement.strip() + "\n", edits, target.filename, target.field(target.edits),
                                 placeholders=self._placeholders, skip_done=True)
            new = without_placeholders(applied.text, self._placeholders)
        elif edits:
            applied = apply_each(base, edits, target.filename, target.field(target.edits),
                                 placeholders=self._placeholders, skip_done=again)
            new = applied.text
        else:
            return base, rejected
        rejected += applied.rejected
        if target.title and not new.startswith(f"{target.title}\n"):
            # A member's profile always says whose it is, whatever the model put first.
            body = new.split("\n", 1)[1] if new.startswith("# ") else new
            new = f"{target.title}\n{body}" if body.startswith("\n") else f"{target.title}\n\n{body}"
        return new, rejected
