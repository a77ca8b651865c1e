"""Composition root: builds every object once and owns their lifetimes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from bot.agents import AgentDirectory
from bot.config import Config
from bot.prompts import PromptLibrary
from bot.storage import Database, Repositories
from memory.workspace import WorkspaceFileService

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Core:
    """What every command needs: configuration, storage, prompts, workspace, agents."""

    config: Config
    db: Database
    repos: Repositories
    prompts: PromptLibrary
    workspace: WorkspaceFileService
    agents: AgentDirectory


@asynccontextmanager
async def open_core(config: Config) -> AsyncIterator[Core]:
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(Database(config.mate.database.path))
        repos = Repositories.over(db)
        prompts = PromptLibrary(config.mate.locale)
        workspace = WorkspaceFileService(repos.workspace_files, prompts)
        agents = AgentDirectory(config.mate, repos, workspace, prompts)
        await agents.ensure_configured()
        yield Core(config, db, repos, prompts, workspace, agents)
