"""AgentDirectory: creates agents (configured or per-chat) with their workspace and cron seed."""

from __future__ import annotations

import asyncio
import logging

from bot.config import MateConfig
from bot.errors import UnknownAgent
from bot.prompts import PromptLibrary
from bot.storage import Repositories
from bot.storage.records import AgentRecord
from memory.workspace import WorkspaceFileService

log = logging.getLogger(__name__)

EMERGENCE_JOB_NAME = "memory-emergence"


class AgentDirectory:
    """The one place that brings an agent into existence, so every agent is seeded alike."""

    def __init__(
        self, config: MateConfig, repos: Repositories, workspace: WorkspaceFileService,
        prompts: PromptLibrary,
    ) -> None:
        self._config = config
        self._repos = repos
        self._workspace = workspace
        self._prompts = prompts
        self._chat_lock = asyncio.Lock()
        self._known: set[int] = set()
        self._records: dict[int, AgentRecord] = {}

    async def ensure_configured(self) -> None:
        """Create the agents of `mate.agents` that do not exist yet (idempotent)."""
        for entry in self._config.agents:
            await self._repos.agents.ensure(entry.id, entry.name)
            await self._seed(entry.id)

    async def _seed(self, agent_id: int) -> None:
        await self._workspace.seed(agent_id)
        if not await self._repos.cron_jobs.for_agent(agent_id):
            await self._repos.cron_jobs.add(
                agent_id, EMERGENCE_JOB_NAME, self._config.memory.emergence_cron,
                self._config.timezone, "text", self._prompts.render("cron/emergence-trigger"),
            )
        self._known.add(agent_id)

    async def get(self, agent_id: int) -> AgentRecord:
        """Agents are never renamed or removed while the daemon runs, so one read each suffices."""
        found = self._records.get(agent_id)
        if found is None:
            found = await self._repos.agents.get(agent_id)
            if found is None:
                raise UnknownAgent(f"agent {agent_id} does not exist")
            self._records[agent_id] = found
        return found

    async def exists(self, agent_id: int) -> bool:
        return agent_id in self._known or await self._repos.agents.get(agent_id) is not None

    async def for_chat(self, chat_key: str, title: str) -> int:
        """The chat's own agent (routing `per-chat`), created with its own workspace on first contact."""
        existing = await self._repos.agents.agent_for_chat(chat_key)
        if existing is not None:
            return existing
        async with self._chat_lock:
            floor = max((a.id for a in self._config.agents), default=0)
            agent_id, created = await self._repos.agents.create_for_chat(chat_key, title[:80], floor)
            if created:
                await self._seed(agent_id)
                log.info("created agent %s for chat", agent_id, extra={"chat_key": chat_key})
            return agent_id
