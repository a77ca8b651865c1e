"""The edits form of a memory reply: exact-once replacements and appends (SPEC S19)."""

from __future__ import annotations

from collections.abc import Sequence
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


def parse_edits(value: Any, field: str) -> tuple[FileEdit, ...]:
    """`[{"old": ..., "new": ...} | {"append": ...}]`; null or missing reads as no edits."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidEdits(f"{field} must be a list")
    edits: list[FileEdit] = []
    for item in value:
        if not isinstance(item, dict):
            raise InvalidEdits(f"{field}: every edit must be an object")
        if "append" in item:
            if not isinstance(item["append"], str):
                raise InvalidEdits(f"{field}: append must be a string")
            if item["append"].strip():
                edits.append(FileEdit(None, item["append"]))
            continue
        old, new = item.get("old"), item.get("new", "")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise InvalidEdits(f'{field}: an edit needs "old" (non-empty text) and "new" (text), or "append"')
        edits.append(FileEdit(old, new))
    return tuple(edits)


def apply_edits(text: str, edits: Sequence[FileEdit], filename: str) -> str:
    """The file after the edits, in order; EditNotApplicable when an `old` is not there exactly once."""
    for edit in edits:
        if edit.old is None:
            body = text.rstrip("\n")
            text = f"{body}\n{edit.new.strip()}\n" if body else f"{edit.new.strip()}\n"
            continue
        found = text.count(edit.old)
        if found != 1:
            where = "not found" if found == 0 else f"found {found} times"
            raise EditNotApplicable(f"{filename}: the text to replace was {where}: {edit.old[:80]!r}")
        text = text.replace(edit.old, edit.new, 1)
    return text
