"""Tests of workspace filename validation against hostile names (SPEC S9)."""

from __future__ import annotations

import pytest

from bot.core.errors import WorkspaceError
from memory.workspace.filenames import (
    MAX_FILENAME_CHARS,
    FilenameExtensionError,
    is_daily_note_name,
    validate_workspace_filename,
)

HOSTILE_NAMES: list[object] = [
    # traversal and absolute paths
    "../x.md",
    "memory/../../x.md",
    "memory/..",
    "./x.md",
    "memory/./x.md",
    "/etc/x.md",
    "/x.md",
    "\\x.md",
    "a\\..\\b.md",
    "memory\\x.md",
    "\\\\server\\x.md",
    "C:\\x.md",
    "C:x.md",
    "c:/x.md",
    # empty segments
    "",
    "memory//x.md",
    "x.md/",
    "/",
    # dot-files: no stem, or a stem that looks like traversal
    ".md",
    "..md",
    "memory/.hidden.md",
    # control and invisible characters
    "x.md\x00",
    "x\x00.md",
    "x\n.md",
    "x\r.md",
    "x\t.md",
    "\x7f.md",
    "x\x85.md",
    "\u202ex.md",
    "x\u200b.md",
    "x\ufeff.md",
    "x\u2028.md",
    "x\ud800.md",
    "x\ue000.md",
    # whitespace at segment edges
    " x.md",
    "x.md ",
    "memory /x.md",
    "memory/\u3000x.md",
    # extensions
    "x.txt",
    "x.MD",
    "x.Md",
    "x.MD.txt",
    "x.md.txt",
    "x",
    "x.md\u00a0",
    "x.ｍｄ",
    # Windows-hostile characters (memory export writes real files)
    "x?.md",
    "x*.md",
    "x|y.md",
    "x<y>.md",
    'x"y.md',
    # length
    "a" * (MAX_FILENAME_CHARS - 2) + ".md",
    "a" * 300 + ".md",
    # compatibility characters that fold into traversal or separators (NFKC)
    "．．/x.md",
    "memory/．/x.md",
    "\u2024\u2024/x.md",
    "memory／x.md",
    "memory＼x.md",
    # not strings at all
    1,
    None,
    [],
    ["x.md"],
    {"filename": "x.md"},
    b"x.md",
    1.5,
    True,
]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=repr)
def test_hostile_name_is_refused(name: object) -> None:
    with pytest.raises(WorkspaceError) as refused:
        validate_workspace_filename(name)
    assert str(refused.value), "the reason must say what is wrong"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("MEMORY.md", "MEMORY.md"),
        ("AGENTS.md", "AGENTS.md"),
        ("memory/2026-04-01.md", "memory/2026-04-01.md"),
        ("notes/项目.md", "notes/项目.md"),
        ("notes/会议（一）.md", "notes/会议（一）.md"),
        ("notes/会议：记录.md", "notes/会议：记录.md"),
        ("my notes.md", "my notes.md"),
        ("a.b.md", "a.b.md"),
        ("x..md", "x..md"),
        ("deep/er/still/x.md", "deep/er/still/x.md"),
        ("a" * (MAX_FILENAME_CHARS - 3) + ".md", "a" * (MAX_FILENAME_CHARS - 3) + ".md"),
        # a decomposed é is stored composed, so one file cannot have two spellings
        ("cafe\u0301.md", "caf\u00e9.md"),
    ],
)
def test_good_name_is_accepted_and_normalised(name: str, expected: str) -> None:
    assert validate_workspace_filename(name) == expected


@pytest.mark.parametrize("name", ["x.txt", "x.MD", "x.md.txt", "notes/x"])
def test_wrong_suffix_is_reported_as_extension_error(name: str) -> None:
    with pytest.raises(FilenameExtensionError):
        validate_workspace_filename(name)


@pytest.mark.parametrize("name", ["../x.md", "x\x00.md", "memory//x.md", 7])
def test_structural_problems_are_not_extension_errors(name: object) -> None:
    with pytest.raises(WorkspaceError) as refused:
        validate_workspace_filename(name)
    assert not isinstance(refused.value, FilenameExtensionError)


@pytest.mark.parametrize(
    ("name", "daily"),
    [
        ("memory/2026-04-01.md", True),
        ("memory/2024-02-29.md", True),
        ("memory/2026-02-29.md", False),
        ("memory/2026-13-01.md", False),
        ("memory/2026-4-1.md", False),
        ("memory/20260401.md", False),
        ("memory/2026-04-01.md.md", False),
        ("memory/2026-04-01.txt", False),
        ("Memory/2026-04-01.md", False),
        ("2026-04-01.md", False),
        ("memory/sub/2026-04-01.md", False),
        ("memory/２０２６-04-01.md", False),
        ("MEMORY.md", False),
        (None, False),
    ],
)
def test_daily_note_name_needs_a_real_date(name: object, daily: bool) -> None:
    assert is_daily_note_name(name) is daily
