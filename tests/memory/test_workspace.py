from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.app.core import Core
from bot.core.errors import VersionConflict
from bot.core.prompts import PromptLibrary
from bot.storage.workspace_files import WorkspaceFileRepository
from memory.workspace.service import SEED_FILES, WorkspaceFileService


async def test_seeded_files_flags_and_order(core: Core) -> None:
    files = await core.workspace.list(1)
    assert [(f.filename, f.enabled, f.sort_order) for f in files] == [
        ("AGENTS.md", True, 0), ("SOUL.md", True, 1), ("PROFILE.md", True, 2), ("MEMORY.md", True, 3)
    ]
    prompts = PromptLibrary("en")
    for record in files:
        assert record.content == prompts.workspace_seed(record.filename)
        assert record.file_size == len(record.content.encode("utf-8"))
        assert record.version == 1


async def test_seeding_twice_creates_nothing(core: Core) -> None:
    assert await core.workspace.seed(1) == 0
    assert len(await core.workspace.list(1)) == len(SEED_FILES)


async def test_seed_creates_one_cron_job_per_agent(core: Core) -> None:
    await core.agents.ensure_configured()
    (job,) = await core.repos.tasks.system_tasks(1)
    assert (job.cron, job.kind, job.enabled) == ("0 2 * * *", "text", True)
    assert "MEMORY.md" in job.message


async def test_system_prompt_format_is_byte_exact_with_cjk(core: Core) -> None:
    for name, _ in SEED_FILES:
        await core.workspace.write(1, name, "")
    await core.workspace.write(1, "AGENTS.md", "规则一\n规则二\n")
    await core.workspace.write(1, "PROFILE.md", "名字：小明 🙂")
    await core.workspace.write(1, "notes.md", "not injected")  # new files start disabled
    await core.workspace.write(1, "ZZZ.md", "late", enabled=True, sort_order=3)
    prompt = await core.workspace.build_system_prompt(1, "Base prompt.")
    expected = (
        "Base prompt.\n\n"
        "--- AGENTS.md ---\n规则一\n规则二\n\n"
        "--- PROFILE.md ---\n名字：小明 🙂\n\n"
        "--- ZZZ.md ---\nlate"
    )
    assert prompt.encode("utf-8") == expected.encode("utf-8")


async def test_file_size_counts_utf8_bytes(core: Core) -> None:
    outcome = await core.workspace.write(1, "memory/2026-04-01.md", "咖啡")
    assert (outcome.created, outcome.file.file_size, outcome.file.enabled) == (True, 6, False)


async def test_logical_delete_hides_file_and_frees_its_name(core: Core) -> None:
    await core.workspace.write(1, "notes.md", "first")
    assert await core.workspace.delete(1, "notes.md")
    assert await core.workspace.get(1, "notes.md") is None
    assert "notes.md" not in [f.filename for f in await core.workspace.list(1)]
    again = await core.workspace.write(1, "notes.md", "second", expected_version=0)
    assert again.created and again.file.content == "second"
    rows = await core.db.fetchall(
        "SELECT content, deleted FROM mate_workspace_file WHERE filename = 'notes.md' ORDER BY id"
    )
    assert [(r[0], r[1]) for r in rows] == [("first", 1), ("second", 0)]


async def test_version_increments_and_conflict_is_reported(core: Core) -> None:
    _, version = await core.workspace.read_text(1, "MEMORY.md")
    first = await core.workspace.write(1, "MEMORY.md", "A", expected_version=version)
    assert first.file.version == version + 1
    with pytest.raises(VersionConflict):
        await core.workspace.write(1, "MEMORY.md", "B", expected_version=version)
    assert (await core.workspace.get(1, "MEMORY.md")).content == "A"
    with pytest.raises(VersionConflict):
        await core.workspace.write(1, "MEMORY.md", "C", expected_version=0)


async def test_append_creates_with_header_then_appends(core: Core) -> None:
    name = "memory/2026-04-03.md"
    await core.workspace.append(1, name, "- first", header="# 2026-04-03")
    await core.workspace.append(1, name, "- second", header="# 2026-04-03")
    assert (await core.workspace.get(1, name)).content == "# 2026-04-03\n\n- first\n\n- second\n"


async def test_agents_do_not_share_files(core: Core) -> None:
    other = await core.agents.for_chat("tg:-1", "Group")
    await core.workspace.write(1, "PROFILE.md", "owner secret")
    assert "owner secret" not in await core.workspace.build_system_prompt(other)
    assert len(await core.workspace.list(other)) == len(SEED_FILES) - 1  # no PROFILE.md: profiles per member


async def test_injection_cache_sees_own_writes_at_once_and_other_writers_after_ttl(core: Core) -> None:
    now = [0.0]
    cached = WorkspaceFileService(core.repos.workspace_files, PromptLibrary("en"), injection_ttl=5,
                                  clock=lambda: now[0])
    other_process = WorkspaceFileService(core.repos.workspace_files, PromptLibrary("en"))
    assert "first fact" not in await cached.injection(1)
    await cached.write(1, "PROFILE.md", "first fact")
    assert "first fact" in await cached.injection(1)
    await other_process.write(1, "PROFILE.md", "second fact")
    assert "first fact" in await cached.injection(1)  # still within the TTL
    now[0] = 6.0
    assert "second fact" in await cached.injection(1)


class _ObservedFiles:
    """The real workspace repository, counting list() calls; with `hold_first`, the first
    list() keeps its (by then old) rows until that event is set."""

    def __init__(self, files: WorkspaceFileRepository, hold_first: asyncio.Event | None = None) -> None:
        self._files = files
        self._hold_first = hold_first
        self.lists = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._files, name)

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        self.lists += 1
        rows = await self._files.list(*args, **kwargs)
        if self._hold_first is not None and self.lists == 1:
            await self._hold_first.wait()
        return rows


async def test_expired_injection_is_read_once_for_all_concurrent_requests(core: Core) -> None:
    files = _ObservedFiles(core.repos.workspace_files)
    now = [0.0]
    service = WorkspaceFileService(files, PromptLibrary("en"), injection_ttl=5, clock=lambda: now[0])  # type: ignore[arg-type]
    await service.write(1, "PROFILE.md", "likes tea")
    texts = await asyncio.gather(*(service.injection(1) for _ in range(50)))
    assert files.lists == 1 and all("likes tea" in t for t in texts)
    now[0] = 6.0  # the TTL ran out: 50 requests at once, still one read
    texts = await asyncio.gather(*(service.injection(1) for _ in range(50)))
    assert files.lists == 2 and all("likes tea" in t for t in texts)


async def test_a_write_during_a_shared_read_is_seen_by_the_next_request(core: Core) -> None:
    release = asyncio.Event()
    service = WorkspaceFileService(_ObservedFiles(core.repos.workspace_files, release),  # type: ignore[arg-type]
                                   PromptLibrary("en"))
    await service.write(1, "PROFILE.md", "likes tea")
    early = asyncio.ensure_future(service.injection(1))  # a read in flight, holding "tea"...
    await asyncio.sleep(0.05)
    await service.write(1, "PROFILE.md", "likes coffee")  # ...when this process writes
    later = asyncio.ensure_future(service.injection(1))
    await asyncio.sleep(0.05)
    release.set()
    assert "likes tea" in await early
    assert "likes coffee" in await later  # it did not join the read begun before the write


async def test_system_prompt_is_the_same_object_while_nothing_changed(core: Core) -> None:
    service = WorkspaceFileService(core.repos.workspace_files, PromptLibrary("en"))
    base = "You are Mate."
    first = await service.build_system_prompt(1, base)
    assert await service.build_system_prompt(1, base) is first
    await service.write(1, "PROFILE.md", "likes tea")
    changed = await service.build_system_prompt(1, base)
    assert "likes tea" in changed and changed is not first


async def test_a_deleted_file_keeps_its_deletion_in_history(core: Core) -> None:
    # Every version of a file, deletion included, is written with its history row (one writer).
    written = await core.workspace.write(1, "notes/trip.md", "- Lisbon in May\n")
    assert await core.workspace.delete(1, "notes/trip.md")
    rows = await core.db.fetchall(
        "SELECT version, content, change FROM mate_workspace_file_history WHERE file_id = ? ORDER BY version",
        (written.file.id,))
    assert [tuple(r) for r in rows] == [(1, "- Lisbon in May\n", "api"), (2, "", "api")]
    assert not await core.workspace.delete(1, "notes/trip.md")  # gone already: nothing more is written
