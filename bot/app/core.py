"""Composition root: builds every object once and owns their lifetimes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from bot.conversation.access import AccessPolicies
from bot.conversation.agents import AgentDirectory
from bot.core.clock import Clock, utc_now
from bot.core.config import Config
from bot.conversation.people import PersonDirectory
from bot.core.prompts import PromptLibrary
from bot.storage import Database, Repositories
from memory.workspace.service import WorkspaceFileService

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Core:
    """What every command needs: configuration, storage, prompts, workspace, agents, people."""

    config: Config
    db: Database
    repos: Repositories
    prompts: PromptLibrary
    workspace: WorkspaceFileService
    agents: AgentDirectory
    access: AccessPolicies
    people: PersonDirectory


@asynccontextmanager
async def open_core(config: Config, *, clock: Clock = utc_now) -> AsyncIterator[Core]:
    """`clock` is the time stored rows carry (the runtime's: a test or a bench pins it)."""
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(Database(config.mate.database.path, clock=clock))
        repos = Repositories.over(db)
        prompts = PromptLibrary(config.mate.locale)
        workspace = WorkspaceFileService(repos.workspace_files, prompts,
                                         history_versions=config.mate.memory.history_versions)
        agents = AgentDirectory(config.mate, repos, workspace, prompts)
        await agents.ensure_configured()
        access = AccessPolicies.from_config(config.mate.channels)
        people = PersonDirectory(config.mate, repos.people, access)
        await people.sync()
        yield Core(config, db, repos, prompts, workspace, agents, access, people)
