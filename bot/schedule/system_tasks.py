"""Runs an agent's system tasks (the nightly consolidation): a `text` task through the agent
(trigger source cron, so memory extraction skips it), an `emergence` task by the service directly."""

from __future__ import annotations

import logging

from bot.conversation.agents import EMERGENCE_JOB_NAME
from bot.conversation.router import ChannelMessageRouter
from bot.core.clock import Clock, utc_now
from bot.storage.search import SearchIndex
from bot.storage.tasks import TaskRecord
from channels.base import InboundMessage, conversation_key
from memory.consolidation.emergence import MemoryEmergenceService
from memory.consolidation.turns import ConsolidationTurns

log = logging.getLogger(__name__)


class SystemTaskRunner:
    """After a nightly consolidation it merges the search index (bot/storage/search_index.py):
    the day's writes left it in pieces."""

    def __init__(self, router: ChannelMessageRouter, emergence: MemoryEmergenceService,
                 consolidation_turns: ConsolidationTurns, search_index: SearchIndex, *,
                 clock: Clock = utc_now) -> None:
        self._router = router
        self._emergence = emergence
        self._consolidation_turns = consolidation_turns
        self._search_index = search_index
        self._clock = clock

    async def __call__(self, task: TaskRecord) -> None:
        if task.kind == "emergence" or (
            task.name == EMERGENCE_JOB_NAME and (self._emergence.proposes or not self._emergence.enabled)
        ):
            # Reviewed consolidation: the agent's memory tool would write MEMORY.md at once; the
            # service proposes the change to the owner instead. Switched off: it says so, nothing runs.
            await self._emerge(task)
        else:
            await self._text_turn(task)

    async def _text_turn(self, task: TaskRecord) -> None:
        # Each run gets its own conversation: last night's review is no context for tonight's.
        stamp = self._clock().strftime("%Y%m%dT%H%M")
        message = InboundMessage(channel="cron", chat_id=f"{task.id}-{stamp}", sender_id="cron",
                                 sender_name="cron", text=task.message, is_direct=True,
                                 trigger_source="cron")
        if task.name == EMERGENCE_JOB_NAME:
            async with self._consolidation_turns.running(task.agent_id, conversation_key(message)) as outcome:
                reply = await self._router.handle(message, agent_id=task.agent_id)
                if reply is None or not reply.answered:  # an apology, "too long", a refusal: no review
                    outcome.status = "failed"
                    outcome.reason = reply.text[:200] if reply is not None else "the review got no answer"
            await self._merge_search_index()
        else:
            reply = await self._router.handle(message, agent_id=task.agent_id)
        log.info("task %s (%s) ran for agent %s: %s", task.id, task.name, task.agent_id,
                 (reply.text[:120] if reply else "no reply"))

    async def _emerge(self, task: TaskRecord) -> None:
        outcome = await self._emergence.emerge(task.agent_id)
        log.info("consolidation for agent %s: %s (%s)", task.agent_id, outcome.status, outcome.reason)
        await self._merge_search_index()

    async def _merge_search_index(self) -> None:
        try:
            await self._search_index.merge()
        except Exception:  # searching still works on an index in pieces, only slower
            log.warning("merging the search index after the nightly consolidation failed", exc_info=True)
