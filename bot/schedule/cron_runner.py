"""Runs mate_cron_job rows: `text` jobs through the agent (trigger_source cron), `emergence` directly."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from bot.conversation.agents import EMERGENCE_JOB_NAME
from bot.conversation.router import ChannelMessageRouter
from bot.core.records import CronJobRecord
from bot.storage.search_index import SqliteSearchIndex
from channels.base import InboundMessage, conversation_key
from memory.consolidation.turns import ConsolidationTurns
from memory.consolidation.emergence import MemoryEmergenceService

log = logging.getLogger(__name__)


class DaemonCronJobRunner:
    """The CronJobRunner of the daemon. After a nightly consolidation it merges the search
    index (bot/storage/search_index.py): the day's writes left it in pieces."""

    def __init__(self, router: ChannelMessageRouter, emergence: MemoryEmergenceService,
                 consolidation_turns: ConsolidationTurns, search_index: SqliteSearchIndex) -> None:
        self._router = router
        self._emergence = emergence
        self._consolidation_turns = consolidation_turns
        self._search_index = search_index

    async def run_text_job(self, job: CronJobRecord) -> None:
        if job.name == EMERGENCE_JOB_NAME and (self._emergence.proposes or not self._emergence.enabled):
            # Reviewed consolidation: the agent's memory tool would write MEMORY.md at once; the
            # service proposes the change to the owner instead. Switched off: it says so, nothing runs.
            await self.run_emergence_job(job)
            return
        # Each run gets its own conversation: last night's review is no context for tonight's.
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M")
        message = InboundMessage(channel="cron", chat_id=f"{job.id}-{stamp}", sender_id="cron",
                                 sender_name="cron", text=job.trigger_message, is_direct=True,
                                 trigger_source="cron")
        if job.name == EMERGENCE_JOB_NAME:
            async with self._consolidation_turns.running(job.agent_id, conversation_key(message)) as outcome:
                reply = await self._router.handle(message, agent_id=job.agent_id)
                if reply is None or not reply.answered:  # an apology, "too long", a refusal: no review
                    outcome.status = "failed"
                    outcome.reason = reply.text[:200] if reply is not None else "the review got no answer"
            await self._merge_search_index()
        else:
            reply = await self._router.handle(message, agent_id=job.agent_id)
        log.info("cron job %s (%s) ran for agent %s: %s", job.id, job.name, job.agent_id,
                 (reply.text[:120] if reply else "no reply"))

    async def run_emergence_job(self, job: CronJobRecord) -> None:
        outcome = await self._emergence.emerge(job.agent_id)
        log.info("cron emergence for agent %s: %s (%s)", job.agent_id, outcome.status, outcome.reason)
        await self._merge_search_index()

    async def _merge_search_index(self) -> None:
        try:
            await self._search_index.merge()
        except Exception:  # searching still works on an index in pieces, only slower
            log.warning("merging the search index after the nightly consolidation failed", exc_info=True)
