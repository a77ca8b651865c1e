"""WorkspaceFileService: per-agent markdown files with versioned writes (SPEC S7)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import VersionConflict, WorkspaceError
from bot.storage.file_versions import Change
from bot.core.records import WorkspaceFileRecord
from bot.storage.workspace_files import WorkspaceFileRepository

log = logging.getLogger(__name__)

# The core files, their injection order, and that they start enabled (seed, S7).
SEED_FILES: tuple[tuple[str, int], ...] = (
    ("AGENTS.md", 0),
    ("SOUL.md", 1),
    ("PROFILE.md", 2),
    ("MEMORY.md", 3),
)
PROFILE_FILE = "PROFILE.md"
MEMORY_FILE = "MEMORY.md"
DAILY_PREFIX = "memory/"


class SeedSource(Protocol):
    def workspace_seed(self, filename: str) -> str: ...


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    file: WorkspaceFileRecord
    created: bool


def daily_note_name(date_iso: str, part: int = 1) -> str:
    """A day's note; past its size cap the day goes on in further parts (memory/2026-12-04-2.md)."""
    return f"{DAILY_PREFIX}{date_iso}.md" if part <= 1 else f"{DAILY_PREFIX}{date_iso}-{part}.md"


def appended_text(content: str, entry: str) -> str:
    """What to add at the end of `content` so that `entry` follows it as a paragraph of its own."""
    separator = "" if content.endswith("\n\n") else "\n" if content.endswith("\n") or not content else "\n\n"
    return f"{separator}{entry.strip()}\n"


class WorkspaceFileService:
    """CRUD over mate_workspace_file and the system-prompt injection built from it."""

    def __init__(
        self, files: WorkspaceFileRepository, seeds: SeedSource, *, injection_ttl: float = 5.0,
        clock: Callable[[], float] = time.monotonic, history_versions: int = 50,
    ) -> None:
        self._files = files
        self.history_versions = history_versions  # versions kept per file
        self._seeds = seeds
        # The injection is read on every request; this process's writes invalidate it at
        # once, and the TTL bounds how long an edit by another process (`memory import`)
        # takes to show.
        self._injection_ttl = injection_ttl
        self._clock = clock
        self._injections: dict[int, tuple[str, float]] = {}
        self._generations: dict[int, int] = {}
        # One read per agent at a time: when the TTL runs out under load, the requests
        # that find it expired share one read instead of each queueing its own.
        self._loading: dict[int, asyncio.Task[str]] = {}
        self._prompts: dict[int, tuple[str, str, str]] = {}

    def invalidate(self, agent_id: int) -> None:
        """The agent's files were written around this service (one extraction's transaction)."""
        self._changed(agent_id)

    def _changed(self, agent_id: int) -> None:
        self._generations[agent_id] = self._generations.get(agent_id, 0) + 1
        self._injections.pop(agent_id, None)
        self._loading.pop(agent_id, None)  # a read begun before this write must not be shared

    async def seed(self, agent_id: int) -> int:
        """Create the missing core files of an agent; returns how many were created."""
        created = 0
        for filename, sort_order in SEED_FILES:
            if await self._files.get(agent_id, filename) is not None:
                continue
            content = self._seeds.workspace_seed(filename)
            if await self._files.insert(agent_id, filename, content, enabled=True, sort_order=sort_order,
                                        keep=self.history_versions):
                created += 1
        if created:
            self._changed(agent_id)
        return created

    async def get(self, agent_id: int, filename: str) -> WorkspaceFileRecord | None:
        return await self._files.get(agent_id, filename)

    async def read_text(self, agent_id: int, filename: str) -> tuple[str, int]:
        """(content, version); ('', 0) for a missing file."""
        found = await self._files.get(agent_id, filename)
        return (found.content, found.version) if found else ("", 0)

    async def list(self, agent_id: int, prefix: str = "") -> list[WorkspaceFileRecord]:
        return await self._files.list(agent_id, prefix)

    async def write(
        self, agent_id: int, filename: str, content: str, *, expected_version: int | None = None,
        enabled: bool = False, sort_order: int = 100, change: Change = "api", run_id: int | None = None,
        expected_file_id: int | None = None,
    ) -> WriteOutcome:
        """Create or replace a file.

        expected_version None writes unconditionally; 0 means "the file must not exist";
        N > 0 means "only if the file is still at version N". A mismatch raises
        VersionConflict and changes nothing. `enabled`/`sort_order` apply only on creation.
        The new version is kept in the file's history with `change` (and the memory run).
        expected_file_id: only that file (its row), never one of the same name created since;
        versions alone cannot tell a removed and recreated file from the one read.
        """
        current = await self._files.get(agent_id, filename)
        if expected_file_id is not None and (current is None or current.id != expected_file_id):
            raise VersionConflict(filename, expected_version or 0, current.version if current else 0)
        if current is None:
            if expected_version not in (None, 0):
                raise VersionConflict(filename, expected_version, 0)
            inserted = await self._files.insert(
                agent_id, filename, content, enabled=enabled, sort_order=sort_order, change=change, run_id=run_id,
                keep=self.history_versions,
            )
            self._changed(agent_id)
            if inserted is None:  # someone created it between our read and insert
                raced = await self._files.get(agent_id, filename)
                raise VersionConflict(filename, expected_version or 0, raced.version if raced else 0)
            return WriteOutcome(inserted, created=True)
        if expected_version is not None and current.version != expected_version:
            raise VersionConflict(filename, expected_version, current.version)
        updated_ok = await self._files.update_content(current.id, content, expected_version, change=change,
                                                      run_id=run_id, keep=self.history_versions)
        return await self._changed_file(agent_id, current, updated_ok)

    async def append(
        self, agent_id: int, filename: str, text: str, *, header: str = "",
        expected_version: int | None = None, change: Change = "api",
    ) -> WriteOutcome:
        """Append `text` (a new file starts with `header`), version-checked like write(). Only the
        added text is written (in SQL) and indexed: a long daily note is not rewritten."""
        current = await self._files.get(agent_id, filename)
        if current is None:
            body = f"{header}\n\n{text.strip()}\n" if header else f"{text.strip()}\n"
            return await self.write(agent_id, filename, body, expected_version=expected_version or 0, change=change)
        if expected_version is not None and current.version != expected_version:
            raise VersionConflict(filename, expected_version, current.version)
        added = appended_text(current.content, text)
        appended_ok = await self._files.append_content(current.id, added, current.version, change=change,
                                                       keep=self.history_versions)
        return await self._changed_file(agent_id, current, appended_ok)

    async def _changed_file(self, agent_id: int, before: WorkspaceFileRecord, changed: bool) -> WriteOutcome:
        """The file as a change of `before` left it; VersionConflict when the change found it at
        another version and wrote nothing."""
        self._changed(agent_id)  # after the commit: a read racing with it is not cached
        if not changed:
            latest = await self._files.get(agent_id, before.filename)
            raise VersionConflict(before.filename, before.version, latest.version if latest else 0)
        updated = await self._files.get(agent_id, before.filename)
        assert updated is not None
        return WriteOutcome(updated, created=False)

    async def delete(self, agent_id: int, filename: str) -> bool:
        """Logical delete: the row stays, the name is free again."""
        current = await self._files.get(agent_id, filename)
        deleted = current is not None and await self._files.soft_delete(current.id, keep=self.history_versions)
        self._changed(agent_id)
        return deleted

    async def set_enabled(self, agent_id: int, filename: str, enabled: bool) -> None:
        await self._files.set_enabled(await self._existing_id(agent_id, filename), enabled)
        self._changed(agent_id)

    async def set_sort_order(self, agent_id: int, filename: str, sort_order: int) -> None:
        await self._files.set_sort_order(await self._existing_id(agent_id, filename), sort_order)
        self._changed(agent_id)

    async def _existing_id(self, agent_id: int, filename: str) -> int:
        current = await self._files.get(agent_id, filename)
        if current is None:
            raise WorkspaceError(f"{filename}: no such file")
        return current.id

    async def injection(self, agent_id: int) -> str:
        """The `--- NAME ---` blocks of the enabled, non-blank files, in sort order."""
        cached = self._injections.get(agent_id)
        if cached is not None and cached[1] > self._clock():
            return cached[0]
        loading = self._loading.get(agent_id)
        if loading is None:
            loading = self._loading[agent_id] = asyncio.ensure_future(self._load_injection(agent_id))
            loading.add_done_callback(lambda done: self._loaded(agent_id, done))
        return await asyncio.shield(loading)  # one caller cancelled must not cancel the others' read

    def _loaded(self, agent_id: int, done: asyncio.Task[str]) -> None:
        if self._loading.get(agent_id) is done:
            del self._loading[agent_id]

    async def _load_injection(self, agent_id: int) -> str:
        generation = self._generations.get(agent_id, 0)
        blocks = [
            f"--- {f.filename} ---\n{f.content.rstrip()}"
            for f in await self._files.list(agent_id, enabled_only=True)
            if f.content.strip()
        ]
        text = "\n\n".join(blocks)
        if self._generations.get(agent_id, 0) == generation:  # no write raced with this read
            self._injections[agent_id] = (text, self._clock() + self._injection_ttl)
        return text

    async def build_system_prompt(self, agent_id: int, base: str = "") -> str:
        """The base system prompt followed by the workspace injection."""
        injection = await self.injection(agent_id)
        built = self._prompts.get(agent_id)
        if built is not None and built[0] is base and built[1] is injection:
            return built[2]  # the same object as last time: its hash for the token-count cache is kept
        prompt = "\n\n".join(part for part in (base.rstrip(), injection) if part)
        self._prompts[agent_id] = (base, injection, prompt)
        return prompt
