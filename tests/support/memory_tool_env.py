"""The workspace every WorkspaceMemoryTool test runs against: a real SQLite workspace for two agents,
where another writer may change a file just before the tool's own write (SPEC S9)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.core.prompts import PromptLibrary
from bot.storage import Database, Repositories
from bot.storage.file_versions import Change
from bot.storage.workspace_files import WorkspaceFileRepository
from bot.core.tools import ToolResult
from memory.workspace.tool import WorkspaceMemoryTool
from memory.workspace.service import WorkspaceFileService, WriteOutcome

AGENT = 1
OTHER_AGENT = 2
LIMIT = 256 * 1024


class InterferingWorkspace(WorkspaceFileService):
    """A real service where another writer changes the file just before each queued write.

    Each entry of `interference` maps the file's current content (None: no file) to
    what the other writer stores; it runs once, right before the tool's own write.
    """

    def __init__(self, files: WorkspaceFileRepository, seeds: PromptLibrary) -> None:
        super().__init__(files, seeds)
        self.interference: list[Callable[[str | None], str]] = []
        self.tool_writes = 0

    async def write(
        self, agent_id: int, filename: str, content: str, *, expected_version: int | None = None,
        enabled: bool = False, sort_order: int = 100, change: Change = "api", run_id: int | None = None,
    ) -> WriteOutcome:
        if self.interference:
            interfere = self.interference.pop(0)
            current = await self.get(agent_id, filename)
            await super().write(agent_id, filename, interfere(current.content if current else None))
        self.tool_writes += 1
        return await super().write(
            agent_id, filename, content, expected_version=expected_version,
            enabled=enabled, sort_order=sort_order, change=change, run_id=run_id,
        )


@dataclass
class Env:
    workspace: InterferingWorkspace
    tool: WorkspaceMemoryTool

    async def call(self, name: str, arguments: Any, agent_id: int = AGENT) -> tuple[dict[str, Any], bool]:
        result = await self.tool.call(agent_id, name, arguments)
        assert isinstance(result, ToolResult)
        return json.loads(result.content), result.is_error

    async def files(self, agent_id: int = AGENT) -> list[tuple[str, int, str, bool, int]]:
        return [
            (f.filename, f.version, f.content, f.enabled, f.sort_order)
            for f in await self.workspace.list(agent_id)
        ]


async def workspace_env(tmp_path: Path, locale: str) -> AsyncIterator[Env]:
    prompts = PromptLibrary(locale)
    async with Database(tmp_path / "mate.db") as db:
        repos = Repositories.over(db)
        workspace = InterferingWorkspace(repos.workspace_files, prompts)
        for agent_id in (AGENT, OTHER_AGENT):
            await repos.agents.ensure(agent_id, f"agent-{agent_id}")
            await workspace.seed(agent_id)
        yield Env(workspace, WorkspaceMemoryTool(workspace, prompts))


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async for value in workspace_env(tmp_path, "en"):
        yield value


@pytest.fixture
async def env_zh(tmp_path: Path) -> AsyncIterator[Env]:
    async for value in workspace_env(tmp_path, "zh-CN"):
        yield value
