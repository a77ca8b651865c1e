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
from bot.features.memory_files import MemoryFilesFeature
from bot.schedule.reminders.service import TaskService
from bot.storage import Repositories, SqlDatabase
from bot.storage.choice import database_for
from memory.trust.history import MemoryHistoryService
from memory.workspace.service import WorkspaceFileService

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Core:
    """What every command needs: configuration, storage, prompts, workspace, agents, people, and
    the feature services the CLI and the daemon's doors share (memory files, tasks)."""

    config: Config
    db: SqlDatabase
    repos: Repositories
    prompts: PromptLibrary
    workspace: WorkspaceFileService
    agents: AgentDirectory
    access: AccessPolicies
    people: PersonDirectory
    history: MemoryHistoryService
    memory_files: MemoryFilesFeature
    tasks: TaskService


@asynccontextmanager
async def open_core(config: Config, *, clock: Clock = utc_now) -> AsyncIterator[Core]:
    """`clock` is the time stored rows carry (the runtime's: a test or a bench pins it)."""
    async with AsyncExitStack() as stack:
        db = database_for(config.mate, clock=clock)
        await stack.enter_async_context(db)
        repos = Repositories.over(db)
        prompts = PromptLibrary(config.mate.locale)
        workspace = WorkspaceFileService(repos.workspace_files, prompts,
                                         history_versions=config.mate.memory.history_versions)
        agents = AgentDirectory(config.mate, repos, workspace, prompts)
        await agents.ensure_configured()
        access = AccessPolicies.from_config(config.mate.channels)
        people = PersonDirectory(config.mate, repos.people, access)
        await people.sync()
        history = MemoryHistoryService(repos, workspace, prompts, config.mate.timezone)
        memory_files = MemoryFilesFeature(workspace, repos.file_history, history, config.mate.timezone)
        tasks = TaskService(config.mate.tasks, config.mate.timezone, repos.tasks, access, prompts, clock=clock)
        yield Core(config, db, repos, prompts, workspace, agents, access, people, history, memory_files, tasks)
