"""The memory files a conversation's cached prefix was built with, and what changed since.

An extraction that edits PROFILE.md or MEMORY.md changes the system prompt; sending the new one
makes the provider write the whole cached history again. While that cache is warm the
conversation keeps its snapshot, and the change reaches the model as a short block with the
current message instead. The system prompt is rebuilt when the cache would have expired
anyway, at compaction (the history is written again then), when the day changes, and at
`/new` (a new conversation).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.llm.cache_lifetime import CACHE_LIFETIMES, still_cached
from bot.llm.port import CacheTtl

# The header each workspace file gets in the system prompt (WorkspaceFileService.injection).
_FILE_HEADER = re.compile(r"^--- (.+?) ---$", re.MULTILINE)
# Past this the block costs about what writing the prefix again costs: rebuild instead.
MAX_NOTE_CHARS = 4000


@dataclass(frozen=True, slots=True)
class FileChange:
    filename: str
    added: tuple[str, ...]
    removed: tuple[str, ...]


def injected_files(system: str, split: int) -> dict[str, str]:
    """The workspace files a system prompt shows, by name (the part after the base prompt)."""
    tail = system[split:]
    headers = list(_FILE_HEADER.finditer(tail))
    files: dict[str, str] = {}
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(tail)
        files[header.group(1)] = tail[header.end():end].strip("\n")
    return files


def memory_changes(before: dict[str, str], after: dict[str, str]) -> list[FileChange]:
    """Lines added and removed per file, in the files' order (a new file: all added)."""
    changes: list[FileChange] = []
    for filename in sorted(set(before) | set(after)):
        old = [line for line in before.get(filename, "").splitlines() if line.strip()]
        new = [line for line in after.get(filename, "").splitlines() if line.strip()]
        if old == new:
            continue
        added: list[str] = []
        removed: list[str] = []
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
            if tag in ("replace", "delete"):
                removed += old[i1:i2]
            if tag in ("replace", "insert"):
                added += new[j1:j2]
        changes.append(FileChange(filename, tuple(added), tuple(removed)))
    return changes


@dataclass(slots=True)
class _Snapshot:
    system: str
    split: int
    summary: str | None
    sent_at: datetime | None = None
    lifetime: timedelta | None = None


@dataclass(frozen=True, slots=True)
class SnapshotChoice:
    system: str
    split: int
    changes: list[FileChange]
    note: str = ""  # the changes as the model reads them, with the current message


class MemorySnapshots:
    """Per conversation (process memory only: after a restart the first turn starts afresh)."""

    _MAX_CONVERSATIONS = 4096  # forgotten all at once past this: those turns rebuild, nothing else

    def __init__(self, render_note: Callable[[list[FileChange]], str]) -> None:
        self._render_note = render_note
        self._snapshots: dict[str, _Snapshot] = {}

    def choose(
        self, conversation_id: str, system: str, split: int, summary: str | None, *, compacted: bool,
        now: datetime,
    ) -> SnapshotChoice:
        """The system prompt this turn sends: the snapshot while its cache is warm and the only
        difference is in the memory files; else `system`, which becomes the new snapshot."""
        kept = self._snapshots.get(conversation_id)
        if kept is not None and not compacted and kept.summary == summary and self._warm(kept, now) \
                and kept.system[:kept.split] == system[:split]:
            changes = [] if system == kept.system else memory_changes(
                injected_files(kept.system, kept.split), injected_files(system, split))
            note = self._render_note(changes) if changes else ""
            if len(note) <= MAX_NOTE_CHARS:
                return SnapshotChoice(kept.system, kept.split, changes, note)
        if len(self._snapshots) >= self._MAX_CONVERSATIONS and conversation_id not in self._snapshots:
            self._snapshots.clear()
        self._snapshots[conversation_id] = _Snapshot(system, split, summary)
        return SnapshotChoice(system, split, [])

    def sent(self, conversation_id: str, lifetime: CacheTtl | None, now: datetime) -> None:
        """The request went out with this cache lifetime (None: caching is off, keep nothing)."""
        kept = self._snapshots.get(conversation_id)
        if kept is None:
            return
        if lifetime is None:
            del self._snapshots[conversation_id]
            return
        kept.sent_at, kept.lifetime = now, CACHE_LIFETIMES[lifetime]

    @staticmethod
    def _warm(kept: _Snapshot, now: datetime) -> bool:
        if kept.sent_at is None or kept.lifetime is None:
            return False
        return still_cached(kept.sent_at, kept.lifetime, now)
