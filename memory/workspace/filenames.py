"""Validation of the workspace file names a model or an admin may use (SPEC S9)."""

from __future__ import annotations

import re
import unicodedata
from datetime import date

from bot.core.errors import WorkspaceError

MAX_FILENAME_CHARS = 256
SUFFIX = ".md"

# Cc/Cf catch NUL, DEL, C1 and invisible format characters (U+202E, U+200B, ZWJ);
# Cs is a lone surrogate (a JSON "\ud800" escape), which SQLite cannot store as UTF-8;
# Co is private use; Zl/Zp are line and paragraph separators that break a listing line.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})

# `matebot memory export` writes these names into a real folder, so characters that
# Windows refuses (and `:`, which also makes `C:x.md` a drive-relative path) are out.
_REFUSED_CHARS = frozenset('\\:*?"<>|')

# A day's note, and its further parts once it reaches its size cap: memory/2026-12-04-2.md.
_DAILY_NOTE = re.compile(r"memory/([0-9]{4}-[0-9]{2}-[0-9]{2})(?:-([2-9]|[1-9][0-9]{1,3}))?\.md")


class FilenameExtensionError(WorkspaceError):
    """The name is well formed but does not end in `.md`."""


def validate_workspace_filename(name: object) -> str:
    """Return `name` NFC-normalised, or raise WorkspaceError with a short reason.

    Decisions beyond SPEC S9:
    - the suffix is exactly lowercase `.md`; `x.MD` is refused, so one file cannot
      hide behind two spellings;
    - no segment may start with `.`: that refuses `.` and `..` and also dot-files
      such as `.md` (no stem) and `..md`, which are easy to confuse with traversal;
    - the NFKC form must pass the path-structure checks too, so `．．/x.md`
      (fullwidth dots) or a fullwidth solidus cannot pose as traversal or a
      separator once some other tool folds compatibility characters; names that
      merely contain compatibility characters (`会议（一）.md`, `会议：记录.md`)
      stay allowed and are kept as written (NFC);
    - `\\`, `:` and the other characters Windows refuses are out, because
      `matebot memory export` writes the names into a real folder.
    """
    if not isinstance(name, str):
        raise WorkspaceError("the filename must be a string")
    if not name:
        raise WorkspaceError("the filename is empty")
    # Checked before normalising: NFC never adds these, and the reason names the raw input.
    _check_characters(name)
    normalised = unicodedata.normalize("NFC", name)
    if len(normalised) > MAX_FILENAME_CHARS:
        raise WorkspaceError(f"the filename is longer than {MAX_FILENAME_CHARS} characters")
    _check_structure(normalised)
    folded = unicodedata.normalize("NFKC", normalised)
    if folded != normalised:
        # Only the path structure is re-checked: a fullwidth colon in `会议：记录.md` is fine,
        # a fullwidth dot or solidus that folds into traversal or a separator is not.
        _check_structure(folded)
        if folded.count("/") != normalised.count("/") or "\\" in folded:
            raise WorkspaceError("the filename contains a character that folds into a path separator")
    if not normalised.endswith(SUFFIX):
        raise FilenameExtensionError("only .md files are allowed")
    return normalised


def _check_characters(name: str) -> None:
    for char in name:
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            raise WorkspaceError(f"the filename contains a control or invisible character U+{ord(char):04X}")
        if char in _REFUSED_CHARS:
            raise WorkspaceError(f"the filename must not contain {char!r}")


def _check_structure(name: str) -> None:
    if name.startswith("/"):
        raise WorkspaceError("absolute paths are not allowed")
    for segment in name.split("/"):
        if not segment:
            raise WorkspaceError("the filename has an empty path segment")
        if segment.startswith("."):
            raise WorkspaceError("a path segment must not start with '.'")
        if segment[0].isspace() or segment[-1].isspace():
            raise WorkspaceError("a path segment must not start or end with whitespace")


def is_daily_note_name(name: object) -> bool:
    """True for `memory/YYYY-MM-DD.md` (or a further part, `memory/YYYY-MM-DD-2.md`) naming a real date."""
    return daily_note_part(name) is not None


def daily_note_part(name: object) -> tuple[str, int] | None:
    """(the date, the part: 1 for the day's first note) of a daily note's name; None for another name."""
    if not isinstance(name, str):
        return None
    match = _DAILY_NOTE.fullmatch(name)
    if match is None:
        return None
    try:
        date.fromisoformat(match.group(1))
    except ValueError:
        return None
    return match.group(1), int(match.group(2) or 1)
