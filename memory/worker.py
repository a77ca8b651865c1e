"""MemoryWorker: runs memory extraction off the reply path, from durable pending rows, once a
conversation pauses (SPEC S6, S34)."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Coroutine
from contextlib import AbstractAsyncContextManager, nullcontext
from datetime import datetime, timedelta
from typing import Any

from bot.core.clock import Clock, iso, parse_iso, utc_now
from bot.core.config import MateConfig
from bot.core.lifecycle import AsyncResource
from bot.core.content.transcript import TRANSCRIPT_ROLES
from bot.core.retry import PENDING_EXTRACTION, Backoff, Sleep
from bot.storage import Repositories
from bot.storage.leases import Leases
from bot.storage.memory_state import MEMORY_LEASE_PREFIX
from bot.core.records import PendingMemoryRecord
from memory.events import ConversationCompletedEvent
from memory.extraction.summarization import (
    RUN_KIND,
    AnalysisOutcome,
    MemorySummarizationService,
)

log = logging.getLogger(__name__)


class MemoryWorker(AsyncResource):
    """MemoryEventSink with one consumer loop, per-agent cooldown and lock, and deferred runs.

    The queue holds agent ids, not events: an agent's run analyses every due pending row
    of that agent, which is what lets skipped triggers coalesce into one deferred run.
    The queue is unbounded but deduplicated, so it never holds more than one entry per agent.

    A row is due once its conversation has been quiet for idle-minutes (by this worker's
    clock): extracting after every exchange held a local server's only model slot for up to
    a minute while the person waited for the next reply. An explicit "remember", a fold,
    /new and max-transcript-messages waiting skip the pause; the cooldown stays the
    minimum gap between two runs of an agent. The pause is not durable: rows found at
    start-up run at once.
    """

    def __init__(
        self, service: MemorySummarizationService, repos: Repositories, config: MateConfig, *,
        clock: Clock = utc_now, sleep: Sleep = asyncio.sleep,
        retry: Backoff = PENDING_EXTRACTION, leases: Leases | None = None,
    ) -> None:
        self._service = service
        # Several daemons on one database: one at a time runs an agent's memory work (None: this
        # daemon is the only one).
        self._leases = leases
        self._repos = repos
        self._memory = config.memory
        self._clock = clock
        self._sleep = sleep
        self._retry = retry  # when a failed pending row is tried again, and how often
        self._queue: asyncio.Queue[int] = asyncio.Queue()
        self._queued: set[int] = set()
        self._locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._last_start: dict[int, datetime] = {}
        self._deferred: dict[int, tuple[datetime, asyncio.Task[None]]] = {}
        self._pause = timedelta(minutes=self._memory.idle_minutes)
        self._spoke: dict[str, datetime] = {}  # conversation -> its last exchange, while within the pause
        self._at_once: set[str] = set()  # conversations whose pending row skips the pause
        self._tasks: set[asyncio.Task[None]] = set()
        self._offline_noted = False

    # -- MemoryEventSink -------------------------------------------------------

    async def publish(self, event: ConversationCompletedEvent, upto_message_id: int) -> None:
        """Pre-check, record the pending row, queue the agent; never waits for an analysis."""
        self._spoken(event.conversation_id)  # a short "ok" the checks skip still means the talk goes on
        go, reason = self._service.should_analyze(event)
        if not go:
            log.info("memory extraction skipped for %s: %s", event.conversation_id, reason,
                     extra={"conversation_id": event.conversation_id})
            return
        if self._service.is_explicit_remember(event.user_message):
            self._at_once.add(event.conversation_id)  # "remember ..." is saved now, not after the pause
        await self._repos.memory_pending.upsert(event.conversation_id, event.agent_id, upto_message_id,
                                                event.trigger_source, due_time=iso(self._clock()))
        self._enqueue(event.agent_id)

    async def record_fold(self, agent_id: int, conversation_id: str, upto_message_id: int) -> None:
        """The window folds messages up to `upto_message_id` away: make sure they get analysed.

        Raw messages stay in mate_message, so a durable pending row is all it takes; the
        worker analyses them without waiting for a pause (cooldown and lock as usual) and
        the reply never waits for an extraction.
        """
        if not self._memory.auto_summarize_enabled:
            return
        conversation = await self._repos.conversations.get(conversation_id)
        if conversation is None or conversation.memory_upto_message_id >= upto_message_id:
            return
        if conversation.trigger_source == "cron" and self._memory.skip_cron_conversations:
            return
        await self._repos.memory_pending.upsert(conversation_id, agent_id, upto_message_id,
                                                conversation.trigger_source, due_time=iso(self._clock()))
        self._at_once.add(conversation_id)
        self._enqueue(agent_id)

    async def conversation_ended(self, agent_id: int, conversation_id: str) -> None:
        """/new archived the conversation: no next message will come, so what it said waiting
        for extraction is analysed now instead of after the pause."""
        if await self._repos.memory_pending.get(conversation_id) is None:
            return
        self._at_once.add(conversation_id)
        self._enqueue(agent_id)

    # -- manual trigger --------------------------------------------------------

    async def summarize_now(self, agent_id: int, conversation_id: str) -> AnalysisOutcome:
        """Run the analysis at once (API, /memory summarize): bypasses the cooldown, not the lock."""
        lock = self._locks[agent_id]
        if lock.locked():
            reason = "busy: a memory analysis for this agent is already running"
            await self._repos.memory_runs.record(agent_id, RUN_KIND, "skipped", conversation_id=conversation_id,
                                                reason=reason)
            return AnalysisOutcome("skipped", False, reason)
        async with lock, self._agent_lease(agent_id) as held:
            if not held:
                reason = "busy: another matebot on this database is analysing this agent's memory"
                await self._repos.memory_runs.record(agent_id, RUN_KIND, "skipped", conversation_id=conversation_id,
                                                    reason=reason)
                return AnalysisOutcome("skipped", False, reason)
            self._last_start[agent_id] = self._clock()
            self._at_once.discard(conversation_id)
            outcome = await self._service.analyze_and_update_memory(agent_id, conversation_id)
        if outcome.status != "failed":
            await self._repos.memory_pending.complete(conversation_id, outcome.watermark)
        return outcome

    # -- lifecycle -------------------------------------------------------------

    async def open(self) -> None:
        """Re-queue every pending row left by a previous run."""
        await self.recover()

    async def recover(self) -> int:
        interrupted = await self._repos.memory_runs.fail_interrupted(
            "interrupted: the process stopped mid-run", self._leases.holder if self._leases else "")
        if interrupted:
            log.warning("closed %d memory runs left running by a previous process", interrupted)
        recovered = await self._recover_unrecorded()
        rows = await self._repos.memory_pending.all()
        for agent_id in dict.fromkeys(row.agent_id for row in rows):
            self._enqueue(agent_id)
        if rows:
            log.info("re-queued %d pending memory extractions (%d found without a pending row)",
                     len(rows), recovered)
        return len(rows)

    async def _recover_unrecorded(self) -> int:
        """Pending rows for conversations with messages past their watermark and no row: the
        row is written just after the reply, so a crash in between would otherwise leave
        those messages unanalysed until the conversation's next exchange."""
        found = 0
        for item in await self._repos.memory_pending.unrecorded():
            event = ConversationCompletedEvent(item.agent_id, item.conversation_id, item.last_user_text,
                                               "", item.message_count, item.trigger_source)
            if self._service.should_analyze(event)[0]:
                await self._repos.memory_pending.upsert(item.conversation_id, item.agent_id, item.last_message_id,
                                                        item.trigger_source, due_time=iso(self._clock()))
                found += 1
        return found

    async def run(self) -> None:
        """The consumer loop; cancelling it cancels the analyses in flight and keeps their rows."""
        try:
            while True:
                agent_id = await self._queue.get()
                self._queued.discard(agent_id)
                self._queue.task_done()
                self._spawn(self._trigger(agent_id), f"memory-agent-{agent_id}")
        finally:
            await self.close()

    async def drain(self, timeout: float) -> bool:
        """Wait until nothing is queued or running (deferred runs not yet due are not waited for)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._idle():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    async def close(self) -> None:
        """Cancel timers and analyses; pending rows stay in the table for the next start."""
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._deferred.clear()

    # -- internals -------------------------------------------------------------

    def _enqueue(self, agent_id: int) -> None:
        if agent_id not in self._queued:
            self._queued.add(agent_id)
            self._queue.put_nowait(agent_id)

    def _idle(self) -> bool:
        now = self._clock()
        waiting = {task: at for at, task in self._deferred.values()}
        busy = [t for t in self._tasks if not t.done() and (t not in waiting or waiting[t] <= now)]
        return self._queue.empty() and not busy

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._guarded(coro, name), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    async def _guarded(coro: Coroutine[Any, Any, None], name: str) -> None:
        try:
            await coro
        except Exception:  # boundary: one bad run must not stop the worker
            log.exception("memory worker task %s failed", name)

    def _spoken(self, conversation_id: str) -> None:
        if not self._pause:
            return
        now = self._clock()
        if len(self._spoke) >= 1024:  # only conversations still inside their pause need an entry
            self._spoke = {c: at for c, at in self._spoke.items() if at + self._pause > now}
        self._spoke[conversation_id] = now

    async def _ready_at(self, row: PendingMemoryRecord, now: datetime) -> datetime:
        """When the row may run: its due time (retries back off), and the end of the
        conversation's pause unless something asked for the extraction at once."""
        due = parse_iso(row.due_time)
        spoke = self._spoke.get(row.conversation_id)
        if spoke is None or spoke + self._pause <= now or row.conversation_id in self._at_once:
            return due
        if await self._gathered(row):
            self._at_once.add(row.conversation_id)
            return due
        return max(due, spoke + self._pause)

    async def _gathered(self, row: PendingMemoryRecord) -> bool:
        """max-transcript-messages unanalysed messages wait: one extraction's worth, read now."""
        conversation = await self._repos.conversations.get(row.conversation_id)
        if conversation is None:
            return True  # nothing to wait for: the run records the skip
        limit = self._memory.max_transcript_messages
        unread = await self._repos.messages.oldest(
            row.conversation_id, limit, after_id=conversation.memory_upto_message_id,
            upto_id=row.upto_message_id, roles=TRANSCRIPT_ROLES, remembered_only=True,
        )
        return len(unread) >= limit

    def _cooldown_end(self, agent_id: int, now: datetime) -> datetime:
        last = self._last_start.get(agent_id)
        return now if last is None else last + timedelta(minutes=self._memory.cooldown_minutes)

    async def _trigger(self, agent_id: int) -> None:
        now = self._clock()
        ready = self._cooldown_end(agent_id, now)
        if ready > now:
            log.info("memory extraction for agent %d deferred: cooldown until %s", agent_id, iso(ready))
            self._defer(agent_id, ready)
            return
        lock = self._locks[agent_id]
        if lock.locked():
            log.info("memory extraction for agent %d deferred: an analysis is running", agent_id)
            self._defer(agent_id, max(ready, now))
            return
        async with lock:
            await self._run_due(agent_id)

    def _defer(self, agent_id: int, at: datetime) -> None:
        """Schedule the agent's one deferred run; an earlier one already scheduled absorbs this."""
        existing = self._deferred.get(agent_id)
        if existing is not None:
            if existing[0] <= at:
                return
            existing[1].cancel()
        task = self._spawn(self._deferred_run(agent_id, at), f"memory-deferred-{agent_id}")
        self._deferred[agent_id] = (at, task)

    async def _deferred_run(self, agent_id: int, at: datetime) -> None:
        delay = (at - self._clock()).total_seconds()
        await self._sleep(max(0.0, delay))
        entry = self._deferred.get(agent_id)
        if entry is not None and entry[1] is asyncio.current_task():
            del self._deferred[agent_id]  # from here on a new trigger schedules a new run
        # The single deferred run waits for a running analysis instead of skipping, so
        # the tail of the conversation is always analysed.
        async with self._locks[agent_id]:
            await self._run_due(agent_id)

    def _agent_lease(self, agent_id: int) -> AbstractAsyncContextManager[bool]:
        """Whether this daemon may run the agent's memory work now (always, alone on its database)."""
        return self._leases.held(f"{MEMORY_LEASE_PREFIX}{agent_id}") if self._leases else nullcontext(True)

    async def _run_due(self, agent_id: int) -> None:
        """Analyse every due pending row of the agent (lock held), unless another daemon is at it
        (then later); reschedule the rest."""
        async with self._agent_lease(agent_id) as held:
            if held:
                await self._run_due_held(agent_id)
            else:
                log.info("memory extraction for agent %d deferred: another daemon runs it", agent_id)
                self._defer(agent_id, self._clock() + timedelta(seconds=self._leases.renew_every if self._leases else 0))

    async def _run_due_held(self, agent_id: int) -> None:
        if self._service.offline:
            # No model reads them: the rows stay, and the next start with a model analyses them.
            if not self._offline_noted:
                self._offline_noted = True
                log.info("memory extraction waits for a model: offline mode keeps the pending conversations")
            return
        now = self._clock()
        due: list[PendingMemoryRecord] = []
        later: list[datetime] = []
        for row in await self._repos.memory_pending.all():
            if row.agent_id != agent_id:
                continue
            ready = await self._ready_at(row, now)
            if ready > now:
                later.append(ready)
            else:
                due.append(row)
        cooldown_end = self._cooldown_end(agent_id, now)
        if cooldown_end > now:
            # Woken inside a cooldown a later run started (the pause ended, a fold): the cooldown
            # stays the minimum gap. A retry keeps its own backoff (S6: 60 s, then 300 s).
            if any(not row.attempts for row in due):
                later.append(cooldown_end)
            due = [row for row in due if row.attempts]
        if due:
            self._last_start[agent_id] = now
        for row in due:
            at_once = row.conversation_id in self._at_once
            # Cleared first: a "remember" arriving while this row runs marks it again.
            self._at_once.discard(row.conversation_id)
            retry_at = await self._process(row)
            if retry_at is not None:
                if at_once:
                    self._at_once.add(row.conversation_id)
                later.append(retry_at)
        if later:
            self._defer(agent_id, min(later))

    async def _process(self, row: PendingMemoryRecord) -> datetime | None:
        """One pending row; returns when to retry it, or None when it is done with."""
        try:
            outcome = await self._service.analyze_and_update_memory(
                row.agent_id, row.conversation_id, upto_message_id=row.upto_message_id, attempts=1, recheck=True
            )
        except Exception as exc:  # boundary: an unexpected error counts as a failed attempt
            log.exception("memory extraction of %s crashed", row.conversation_id,
                          extra={"conversation_id": row.conversation_id})
            outcome = AnalysisOutcome("failed", False, f"unexpected error: {exc!r}", retryable=True)
        if outcome.status == "failed" and outcome.retryable:
            return await self._record_failure(row, outcome.reason)
        await self._repos.memory_pending.complete(row.conversation_id, row.upto_message_id)
        return None

    async def _record_failure(self, row: PendingMemoryRecord, error: str) -> datetime | None:
        # row.attempts failed before this one: this failure asks for retry number row.attempts.
        due = self._clock() + timedelta(seconds=self._retry.delay(row.attempts))
        attempts = await self._repos.memory_pending.record_failure(row.conversation_id, error, iso(due))
        if self._retry.allows(attempts - 1):
            return due
        # Give up: the watermark did not move, so the next event of this conversation
        # brings these messages back into its transcript.
        await self._repos.memory_pending.delete(row.conversation_id)
        await self._repos.memory_runs.record(
            row.agent_id, RUN_KIND, "failed", conversation_id=row.conversation_id,
            reason=f"gave up after {attempts} attempts", error=error,
        )
        log.error("memory extraction of %s gave up after %d attempts: %s", row.conversation_id, attempts,
                  error, extra={"conversation_id": row.conversation_id})
        return None
