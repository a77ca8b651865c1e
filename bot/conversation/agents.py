"""AgentDirectory: creates agents (configured, per-chat or per-person) with their workspace and cron seed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from bot.core.config import MateConfig
from bot.core.errors import ConfigError, UnknownAgent
from bot.core.prompts import PromptLibrary
from bot.storage import Repositories
from bot.storage.agents import AgentSeed
from bot.storage.people import OWNER_PERSON_ID, PERSON_BINDING_PREFIX, person_binding
from bot.core.records import AgentRecord
from memory.workspace.service import PROFILE_FILE, SEED_FILES, WorkspaceFileService

log = logging.getLogger(__name__)

EMERGENCE_JOB_NAME = "memory-emergence"
REVIEW_TOOL_ROUNDS = 3


def configured_id_collision(config: MateConfig, bindings: Mapping[int, str]) -> str:
    """The config error when a configured agent id belongs to a per-chat agent, else ''."""
    taken = sorted((entry.id, bindings[entry.id]) for entry in config.agents if entry.id in bindings)
    if not taken:
        return ""
    agent_id, key = taken[0]
    owner = (f"person {key.removeprefix(PERSON_BINDING_PREFIX)}" if key.startswith(PERSON_BINDING_PREFIX)
             else f"the chat {key}")
    return (f"mate.agents: id {agent_id} already belongs to the agent created for {owner}; "
            "give the configured agent an id that is not in use")


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
        """Create the agents of `mate.agents` and whatever of their seed is missing (idempotent).

        A configured id that a group's own agent already holds stops start-up: the two
        would share one workspace, so the group would read the owner's memory and back.
        """
        await self.check_configured_ids()
        for entry in self._config.agents:
            await self._repos.agents.provision(self._seed_for(entry.name), agent_id=entry.id)
            self._workspace.invalidate(entry.id)
            self._known.add(entry.id)

    async def check_configured_ids(self) -> None:
        taken = await self._repos.agents.bound_to_chats([entry.id for entry in self._config.agents])
        problem = configured_id_collision(self._config, taken)
        if problem:
            raise ConfigError(problem)

    def _seed_for(self, name: str, *, with_profile: bool = True) -> AgentSeed:
        memory = self._config.memory
        rounds = self._config.agent.max_tool_rounds
        # The review takes three tool rounds (list, read the notes at once, edit); with fewer
        # allowed the job runs the consolidation service directly instead.
        task_type = "text" if rounds >= REVIEW_TOOL_ROUNDS else "emergence"
        return AgentSeed(
            name=name,
            files=[(filename, self._prompts.workspace_seed(filename), order) for filename, order in SEED_FILES
                   if with_profile or filename != PROFILE_FILE],
            job=(EMERGENCE_JOB_NAME, memory.emergence_cron, self._config.timezone, task_type,
                 self._prompts.render("cron/emergence-trigger", max_tool_rounds=rounds,
                                      day_range=memory.emergence_day_range)),
        )

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

    async def for_person(self, person_id: int) -> int:
        """A person's own agent (routing `per-person`), bound to the person as a group's agent is to
        its chat, so the same id rules hold for both. It has the owner's agent's name: the
        assistant is the same one, with a memory of its own (never the person's display name,
        which the network chose)."""
        name = next((a.name for a in self._config.agents if a.id == 1), self._config.agents[0].name)
        return await self.for_chat(person_binding(person_id), name, seed_profile=True)

    async def existing_for_chat(self, chat_key: str) -> int | None:
        """The chat's own agent if it has one yet (None: not yet); creates nothing."""
        return await self._repos.agents.agent_for_chat(chat_key)

    async def existing_for_account(self, channel: str, sender_id: str, *, is_owner: bool) -> int | None:
        """The agent `per-person` routing gives this account, if it exists yet; creates no person and
        no agent (None: either is not there). The owner's is agent 1."""
        if is_owner:
            return 1
        person = await self._repos.people.for_account(channel, sender_id)
        if person is None:
            return None
        if person.id == OWNER_PERSON_ID:  # an account linked to the owner in mate.people
            return 1
        return await self.existing_for_chat(person_binding(person.id))

    async def for_chat(self, chat_key: str, title: str, *, seed_profile: bool = False) -> int:
        """The chat's own agent (routing `per-chat`), created with its own workspace on first contact.

        A group's agent has no PROFILE.md: it keeps one profile per member under people/.
        """
        existing = await self._repos.agents.agent_for_chat(chat_key)
        if existing is not None:
            return existing
        async with self._chat_lock:
            floor = max((a.id for a in self._config.agents), default=0)
            agent_id, created = await self._repos.agents.provision(
                self._seed_for(title[:80], with_profile=seed_profile), chat_key=chat_key, min_id=floor)
            if created:
                self._workspace.invalidate(agent_id)
                self._known.add(agent_id)
                log.info("created agent %s for chat", agent_id, extra={"chat_key": chat_key})
            return agent_id
