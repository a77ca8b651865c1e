"""The edits form of a memory reply: exact-once replacements and appends (SPEC S19, S34)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


class InvalidEdits(ValueError):
    """The edits list is not a list of {"old", "new"} / {"append"} objects."""


class EditNotApplicable(ValueError):
    """An edit's `old` text is not found exactly once in the file it targets."""


@dataclass(frozen=True, slots=True)
class FileEdit:
    old: str | None  # None: append `new` at the end
    new: str


@dataclass(frozen=True, slots=True)
class Rejection:
    """One part of a reply left out: an edit that does not fit its file, or text copied from the
    prompt's example instead of written. The rest of the reply is still used."""
    where: str  # the reply's field and index: memory_edits[1], people_edits.P2[0], daily_entry
    filename: str
    why: str  # missing | repeated | example
    text: str  # the edit's `old`, or the copied text
    found: int = 0

    def __str__(self) -> str:
        if self.why == "example":
            return f"{self.where}: {self.text[:80]!r} is the example's placeholder, not a fact"
        where = "not found" if self.why == "missing" else f"found {self.found} times"
        return f"{self.where}: the text to replace was {where} in {self.filename}: {self.text[:80]!r}"


@dataclass(frozen=True, slots=True)
class EditsApplied:
    text: str
    rejected: tuple[Rejection, ...]


# A line of the example ("...", "- ...", "<a fact>") that a small model copies instead of writing its own,
# or the prompt's own frame around a file ('<profile ref="P2">(empty)</profile>', a line "(empty)").
_FILLER = re.compile(r"(?:[-*]\s*)?(?:\.{2,}|…+|<[^<>\n]*>|<[^<>\n]*>[^<>\n]{0,20}</[^<>\n]*>|[(（][^()（）\n]{0,20}[)）])")
_PLACEHOLDER = re.compile(r"_[^_\n]+_")


def is_example_filler(text: str) -> bool:
    """Only headings and lines the example shows as stand-ins ("- ...", "<...>"): nothing of its own."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return bool(lines) and all(_FILLER.fullmatch(line) for line in lines)


def placeholder_lines(seeds: Iterable[str]) -> frozenset[str]:
    """The seeds' whole-line italics ("_Nothing known yet._"): what a file holds until it knows a fact."""
    return frozenset(line.strip() for seed in seeds for line in seed.splitlines()
                     if _PLACEHOLDER.fullmatch(line.strip()))


def without_placeholders(text: str, placeholders: frozenset[str]) -> str:
    """`text` without its placeholder lines once it holds anything else (headings aside)."""
    lines = text.split("\n")
    if not any(line.strip() in placeholders for line in lines):
        return text
    if not any(line.strip() and not line.lstrip().startswith("#") and line.strip() not in placeholders
               for line in lines):
        return text
    kept: list[str] = []
    skip_blank = False
    for number, line in enumerate(lines):
        if line.strip() in placeholders:
            # The blank line that set the placeholder apart goes with it.
            following = lines[number + 1] if number + 1 < len(lines) else "x"
            skip_blank = bool(kept) and not kept[-1].strip() and not following.strip()
            continue
        if not (skip_blank and not line.strip()):
            kept.append(line)
        skip_blank = False
    return "\n".join(kept)


def parse_edits(value: Any, field: str) -> tuple[FileEdit, ...]:
    """`[{"old": ..., "new": ...} | {"append": ...}]`; null or missing reads as no edits."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidEdits(f"{field} must be a list of edits")
    edits: list[FileEdit] = []
    for index, item in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(item, dict):
            raise InvalidEdits(f'{where}: every edit must be an object, {{"old": ..., "new": ...}} or {{"append": ...}}')
        if "append" in item:
            if not isinstance(item["append"], str):
                raise InvalidEdits(f"{where}: append must be a string")
            if item["append"].strip():
                edits.append(FileEdit(None, item["append"]))
            continue
        old, new = item.get("old"), item.get("new", "")
        if old in (None, "") and isinstance(new, str) and new.strip():
            # {"new": "..."} with nothing to replace: a small model's way of adding a line.
            edits.append(FileEdit(None, new))
            continue
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise InvalidEdits(f'{where}: an edit needs "old" (non-empty text) and "new" (text), or "append"')
        edits.append(FileEdit(old, new))
    return tuple(edits)


def apply_edits(text: str, edits: Sequence[FileEdit], filename: str) -> str:
    """The file after the edits, in order; EditNotApplicable when an `old` is not there exactly once."""
    for edit in edits:
        if edit.old is None:
            text = _appended(text, edit.new)
            continue
        found = text.count(edit.old)
        if found != 1:
            where = "not found" if found == 0 else f"found {found} times"
            raise EditNotApplicable(f"{filename}: the text to replace was {where}: {edit.old[:80]!r}")
        text = text.replace(edit.old, edit.new, 1)
    return text


def apply_each(
    text: str, edits: Sequence[FileEdit], filename: str, field: str, *,
    placeholders: frozenset[str] = frozenset(), skip_done: bool = False,
) -> EditsApplied:
    """The file after every edit that fits, in order; each one that does not is rejected alone.

    An edit inside a placeholder line replaces the whole line, and a file that gained anything
    loses its placeholder lines. `skip_done`: an edit whose result the text already holds is
    passed over (edits beside a full replacement, or given again when asked for a correction).
    """
    original = text
    rejected: list[Rejection] = []
    for index, edit in enumerate(edits):
        where = f"{field}[{index}]"
        copied = next((part for part in (edit.old or "", edit.new) if is_example_filler(part)), None)
        if copied is not None:
            rejected.append(Rejection(where, filename, "example", copied))
            continue
        if edit.old is None:
            if not (skip_done and edit.new.strip() in text):
                text = _appended(text, edit.new)
            continue
        if edit.old.strip() == edit.new.strip():  # changes nothing ("empty" for "empty")
            continue
        found = text.count(edit.old)
        if found == 0 and edit.new.strip() and not _holds_facts(original, placeholders):
            # A file with nothing in it yet: an edit there can only mean its new text (a small
            # model "replaced" a line it made up in an empty profile).
            if not (skip_done and edit.new.strip() in text):
                text = _appended(text, edit.new)
            continue
        if found != 1:
            if not (skip_done and edit.new.strip() and edit.new.strip() in text):
                rejected.append(Rejection(where, filename, "missing" if found == 0 else "repeated", edit.old, found))
            continue
        start = text.index(edit.old)
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start + len(edit.old))
        line_end = len(text) if line_end == -1 else line_end
        if "\n" not in edit.old and text[line_start:line_end].strip() in placeholders:
            # "_Nothing known yet._" edited inside would keep its underscores around the fact.
            text = text[:line_start] + edit.new.strip() + text[line_end:]
        else:
            text = text[:start] + edit.new + text[start + len(edit.old):]
    if text != original:
        text = without_placeholders(text, placeholders)
    return EditsApplied(text, tuple(rejected))


def _holds_facts(text: str, placeholders: frozenset[str]) -> bool:
    """Any line besides headings and the seed's placeholder lines."""
    return any(line.strip() and not line.lstrip().startswith("#") and line.strip() not in placeholders
               for line in text.splitlines())


def _appended(text: str, addition: str) -> str:
    body = text.rstrip("\n")
    return f"{body}\n{addition.strip()}\n" if body else f"{addition.strip()}\n"
