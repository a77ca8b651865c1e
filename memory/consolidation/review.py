"""ConsolidationReview: a consolidation proposes MEMORY.md for the owner, who approves or rejects it (SPEC S29)."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from bot.core.clock import Clock, iso, utc_now
from bot.core.errors import VersionConflict
from bot.core.prompts import PromptLibrary
from bot.storage import Repositories
from bot.storage.proposals import ProposalRecord
from channels.base import OutboundMessage, conversation_target
from memory.trust.history import MemoryHistoryService
from memory.trust.receipts import Outbox
from memory.workspace.service import WorkspaceFileService

log = logging.getLogger(__name__)

EXPIRY_HOURS = 48
DIFF_LINES = 40  # a longer diff is cut (the web page shows it whole)


def memory_diff(before: str, after: str, limit: int = DIFF_LINES) -> str:
    """The changed lines, unified-diff style without headers; at most `limit` lines."""
    lines = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
             if not line.startswith(("---", "+++", "@@"))]
    if len(lines) > limit:
        lines = [*lines[:limit], f"… (+{len(lines) - limit})"]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class OwnerChannel:
    """A channel where the owner's direct chat is looked for (in the order given), and the chat
    to use there when none is stored yet (on some channels a private chat's id is the user's)."""

    channel: str
    fallback_chat: str | None = None


class ConsolidationReview:
    def __init__(self, repos: Repositories, workspace: WorkspaceFileService, prompts: PromptLibrary,
                 outbox: Outbox, history: MemoryHistoryService, *, owner_channels: Sequence[OwnerChannel] = (),
                 clock: Clock = utc_now) -> None:
        self._repos = repos
        self._workspace = workspace
        self._prompts = prompts
        self._outbox = outbox
        self._history = history
        self._owner_channels = tuple(owner_channels)
        self._clock = clock

    async def propose(self, agent_id: int, filename: str, base_version: int, before: str, after: str,
                      reason: str, run_id: int | None) -> bool:
        """Keep the proposal and send its diff to the owner's direct chat; False when no chat
        of the owner's was found (the web page shows it)."""
        expires = iso(self._clock() + timedelta(hours=EXPIRY_HOURS))
        await self._repos.proposals.propose(agent_id, filename, base_version, after, reason, run_id, expires)
        agent = await self._repos.agents.get(agent_id)
        # The owner's chat talks to agent 1: another agent's proposal is answered with its id.
        which = "" if agent_id == 1 else f" {agent_id}"
        text = self._prompts.text("proposal_sent", reason=reason, hours=EXPIRY_HOURS, agent=agent.name if agent else "?",
                                  which=which, diff=f"```diff\n{memory_diff(before, after)}\n```")
        for channel in self._owner_channels:
            target = await self._owner_chat(channel)
            if target is None:
                continue
            where, chat_id, thread_id = target
            if await self._outbox.send(OutboundMessage(where, chat_id, text, thread_id)):
                return True
        log.info("a consolidation proposal for agent %s waits on the web page (no owner chat found)", agent_id)
        return False

    async def _owner_chat(self, owner: OwnerChannel) -> tuple[str, str, str | None] | None:
        conversation = await self._repos.proposals.owner_direct_chat(owner.channel)
        if conversation is not None:
            return conversation_target(conversation)
        return (owner.channel, owner.fallback_chat, None) if owner.fallback_chat else None

    async def pending(self, agent_id: int) -> ProposalRecord | None:
        return await self._repos.proposals.pending(agent_id, iso(self._clock()))

    async def approve(self, agent_id: int) -> str:
        return (await self.apply(agent_id))[1]

    async def apply(self, agent_id: int) -> tuple[bool, str]:
        """(applied, the answer): applied only onto the MEMORY.md version the proposal was made from."""
        t = self._prompts.text
        proposal = await self.pending(agent_id)
        if proposal is None:
            return False, t("proposal_none")
        try:
            if not await self._repos.proposals.apply(proposal, self._workspace.history_versions):
                return False, t("proposal_none")
        except VersionConflict:
            await self._repos.proposals.set_status(proposal.id, "stale")
            latest = await self._repos.workspace_files.get(agent_id, proposal.filename)
            return False, t("proposal_stale", when=self._history.when(latest.update_time) if latest else "?")
        finally:
            self._workspace.invalidate(agent_id)
        log.info("consolidation proposal %s applied to %s", proposal.id, proposal.filename)
        return True, t("proposal_approved")

    async def reject(self, agent_id: int) -> str:
        proposal = await self.pending(agent_id)
        if proposal is None or not await self._repos.proposals.set_status(proposal.id, "rejected"):
            return self._prompts.text("proposal_none")
        return self._prompts.text("proposal_rejected")
