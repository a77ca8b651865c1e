"""MemorySummarizationService: unanalysed messages -> PROFILE.md, MEMORY.md and daily-note writes (SPEC S6, S7)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.clock import Clock, local_date, utc_now
from bot.config import MateConfig
from bot.errors import LLMError, VersionConflict
from bot.llm import LLMClient, LLMRequest
from bot.prompts import LOCALES, PromptLibrary
from bot.storage import Repositories
from bot.storage.records import MessageRecord
from memory.events import ConversationCompletedEvent
from memory.json_reply import InvalidJsonReply, parse_memory_reply
from memory.transcript import TRANSCRIPT_ROLES, build_transcript
from memory.workspace import (
    MEMORY_FILE,
    PROFILE_FILE,
    SEED_FILES,
    WorkspaceFileService,
    daily_note_name,
)

log = logging.getLogger(__name__)

RUN_KIND = "summarize"
REPLY_FIELDS = ("daily_entry", "memory_update", "profile_update")
DEFAULT_ATTEMPTS = 3
DEFAULT_RETRY_DELAYS: tuple[float, ...] = (1.0, 4.0)
# Already-analysed messages shown before the transcript so the model knows what the
# new lines refer to; short, since they must not be recorded again.
EARLIER_CONTEXT_MESSAGES = 6
EARLIER_CONTEXT_CHARS = 300
_SORT_ORDER = dict(SEED_FILES)

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class AnalysisOutcome:
    status: str  # completed | skipped | failed
    updated: bool
    reason: str
    files: tuple[str, ...] = ()
    watermark: int = 0  # the conversation's memory_upto_message_id afterwards
    retryable: bool = False  # a failure that another attempt may not hit (LLM, JSON, conflicts)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """The files as read before the LLM call: their versions guard the writes."""
    date: str
    profile: tuple[str, int]
    memory: tuple[str, int]
    daily: tuple[str, int]


class _RetryableFailure(Exception):
    """One attempt failed in a way worth trying again (bad JSON, LLM error, repeated conflict)."""


class MemorySummarizationService:
    """Analyses a conversation in watermark-ordered batches; callers serialise per agent."""

    def __init__(
        self, config: MateConfig, repos: Repositories, workspace: WorkspaceFileService, llm: LLMClient,
        prompts: PromptLibrary, clock: Clock = utc_now, *, sleep: Sleep = asyncio.sleep,
        retry_delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
    ) -> None:
        self._config = config
        self._memory = config.memory
        self._repos = repos
        self._workspace = workspace
        self._llm = llm
        self._prompts = prompts
        self._clock = clock
        self._sleep = sleep
        self._retry_delays = tuple(retry_delays) or (0.0,)
        # Every locale's words: a bilingual owner writes "记住 ..." to an English-locale bot too.
        words = [w for locale in LOCALES for w in PromptLibrary(locale).words("remember_words")]
        self._remember_words = tuple(
            w.casefold() for w in (*words, *self._memory.remember_keywords) if w.strip()
        )

    # -- pre-checks ------------------------------------------------------------

    def is_explicit_remember(self, text: str) -> bool:
        folded = text.casefold()
        return any(word in folded for word in self._remember_words)

    def should_analyze(self, event: ConversationCompletedEvent) -> tuple[bool, str]:
        """The cheap checks of S6, run before an event is queued; (go, reason)."""
        memory = self._memory
        if not memory.auto_summarize_enabled:
            return False, "auto-summarize is disabled"
        if event.trigger_source == "cron" and memory.skip_cron_conversations:
            return False, "cron conversation"
        if self.is_explicit_remember(event.user_message):
            return True, "explicit request to remember"
        if event.message_count < memory.min_messages_for_summarize:
            return False, f"only {event.message_count} messages (minimum {memory.min_messages_for_summarize})"
        length = len(event.user_message.strip())
        if length < memory.min_user_message_length:
            return False, f"last user message has {length} characters (minimum {memory.min_user_message_length})"
        return True, "ok"

    # -- analysis --------------------------------------------------------------

    async def analyze_and_update_memory(
        self, agent_id: int, conversation_id: str, *, upto_message_id: int | None = None,
        attempts: int = DEFAULT_ATTEMPTS,
    ) -> AnalysisOutcome:
        """Analyse messages after the watermark up to `upto_message_id` (default: the last one).

        More than max-transcript-messages unanalysed messages are taken in consecutive
        batches, oldest first; the watermark moves after each batch, so a failure later on
        never repeats an earlier batch. `attempts` counts tries per batch, in process.
        """
        conversation = await self._repos.conversations.get(conversation_id)
        if conversation is None or conversation.agent_id != agent_id:
            return await self._skip(agent_id, conversation_id, "no such conversation for this agent", 0)
        upto = upto_message_id if upto_message_id is not None else (
            await self._repos.messages.last_id(conversation_id)
        )
        watermark = conversation.memory_upto_message_id
        limit = self._memory.max_transcript_messages
        files: list[str] = []
        reasons: list[str] = []
        problems: list[str] = []  # failures that moved the watermark (over budget): later batches still run
        while watermark < upto:
            rows = await self._repos.messages.oldest(
                conversation_id, limit + 1, after_id=watermark, upto_id=upto, roles=TRANSCRIPT_ROLES
            )
            if not rows:  # only tool/system turns left: nothing to read, move past them
                await self._repos.conversations.set_memory_watermark(conversation_id, upto)
                watermark = upto
                break
            batch = rows[:limit]
            end = batch[-1].id if len(rows) > limit else upto
            outcome = await self._batch(agent_id, conversation_id, batch, watermark, end, attempts)
            files += [f for f in outcome.files if f not in files]
            if outcome.retryable:
                return AnalysisOutcome("failed", bool(files), outcome.reason, tuple(files), watermark, True)
            (problems if outcome.status == "failed" else reasons).append(outcome.reason)
            watermark = end
        if not reasons and not problems:
            return await self._skip(agent_id, conversation_id, "no new messages since the last analysis", watermark)
        if problems:
            return AnalysisOutcome("failed", bool(files), "; ".join(problems), tuple(files), watermark)
        reason = reasons[-1] if len(reasons) == 1 else f"{len(reasons)} batches; {reasons[-1]}"
        return AnalysisOutcome("completed", bool(files), reason, tuple(files), watermark)

    async def _skip(self, agent_id: int, conversation_id: str, reason: str, watermark: int) -> AnalysisOutcome:
        await self._repos.memory_runs.record(agent_id, RUN_KIND, "skipped", conversation_id=conversation_id,
                                            reason=reason)
        return AnalysisOutcome("skipped", False, reason, watermark=watermark)

    async def _batch(
        self, agent_id: int, conversation_id: str, batch: Sequence[MessageRecord], watermark: int,
        end: int, attempts: int,
    ) -> AnalysisOutcome:
        earlier = await self._repos.messages.latest(
            conversation_id, EARLIER_CONTEXT_MESSAGES, upto_id=watermark, roles=TRANSCRIPT_ROLES
        ) if watermark else []
        transcript = build_transcript(batch, self._prompts, self._memory.max_transcript_message_chars)
        earlier_text = build_transcript(earlier, self._prompts, EARLIER_CONTEXT_CHARS)
        attempts = max(1, attempts)
        for attempt in range(1, attempts + 1):
            run_id = await self._repos.memory_runs.start(agent_id, RUN_KIND, conversation_id)
            try:
                outcome = await self._attempt(agent_id, conversation_id, transcript, earlier_text, end)
            except _RetryableFailure as exc:
                await self._repos.memory_runs.finish(
                    run_id, "failed", reason=f"attempt {attempt}/{attempts}", error=str(exc)
                )
                log.warning("memory extraction attempt %d/%d failed for %s: %s", attempt, attempts,
                            conversation_id, exc, extra={"conversation_id": conversation_id})
                if attempt == attempts:
                    return AnalysisOutcome("failed", False, str(exc), retryable=True)
                await self._sleep(self._retry_delays[min(attempt - 1, len(self._retry_delays) - 1)])
                continue
            except BaseException as exc:  # never leave a run row "running" (cancellation included)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._repos.memory_runs.finish(run_id, "failed", error=repr(exc)))
                raise
            await self._repos.memory_runs.finish(run_id, outcome.status, reason=outcome.reason)
            return outcome
        raise AssertionError("unreachable")

    async def _attempt(
        self, agent_id: int, conversation_id: str, transcript: str, earlier: str, end: int
    ) -> AnalysisOutcome:
        """One analysis; if a file changed during the LLM call it is redone once on fresh contents."""
        for redo in (False, True):
            snapshot = await self._read_files(agent_id)
            try:
                reply, problems = await self._ask(snapshot, transcript, earlier)
            except (LLMError, InvalidJsonReply) as exc:
                kind = "invalid JSON reply" if isinstance(exc, InvalidJsonReply) else "LLM error"
                raise _RetryableFailure(f"{kind}: {exc}") from None
            try:
                return await self._write(agent_id, conversation_id, snapshot, reply, problems, end)
            except VersionConflict as exc:
                if redo:
                    raise _RetryableFailure(f"changed again during the redo: {exc}") from None
                log.info("memory file changed during extraction (%s); redoing on fresh contents", exc,
                         extra={"conversation_id": conversation_id})
        raise AssertionError("unreachable")

    async def _read_files(self, agent_id: int) -> _Snapshot:
        zone = self._config.timezone  # "local" = the system's zone
        now = self._clock()
        date = local_date(zone, now)
        return _Snapshot(
            date=date,
            profile=await self._workspace.read_text(agent_id, PROFILE_FILE),
            memory=await self._workspace.read_text(agent_id, MEMORY_FILE),
            daily=await self._workspace.read_text(agent_id, daily_note_name(date)),
        )

    async def _complete(self, messages: list[dict[str, Any]], system: str) -> str:
        request = LLMRequest(model=self._config.llm.effective_memory_model, system=system, messages=messages,
                             max_tokens=self._memory.summary_max_tokens, purpose="memory")
        return (await self._llm.complete(request)).text

    async def _ask(self, snap: _Snapshot, transcript: str, earlier: str) -> tuple[dict[str, Any], list[str]]:
        """The parsed reply, with over-budget replacements sent back once and then dropped."""
        memory = self._memory
        system = self._prompts.render("memory/summarize-system", profile_max_chars=memory.profile_max_chars,
                                      memory_max_chars=memory.memory_max_chars)
        user = self._prompts.render(
            "memory/summarize-user", date=snap.date,
            profile=snap.profile[0], profile_chars=len(snap.profile[0]), profile_max_chars=memory.profile_max_chars,
            memory=snap.memory[0], memory_chars=len(snap.memory[0]), memory_max_chars=memory.memory_max_chars,
            daily_note=snap.daily[0], earlier_context=earlier, transcript=transcript,
        )
        messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
        text = await self._complete(messages, system)
        reply = parse_memory_reply(text, REPLY_FIELDS)
        over = self._over_budget(reply)
        if not reply["should_update"] or not over:
            return reply, []
        # S7: never truncate silently; ask once for a shorter version, keeping the first answer.
        follow_up = "\n\n".join(
            self._prompts.render("memory/shorten", field=field, actual_chars=actual, max_chars=limit)
            for field, actual, limit in over
        )
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": follow_up}]
        try:
            shorter = parse_memory_reply(await self._complete(messages, system), REPLY_FIELDS)
            for field, _, _ in over:
                reply[field] = shorter[field]
        except InvalidJsonReply:
            pass  # the fields stay over budget and are dropped below
        problems: list[str] = []
        for field, actual, limit in self._over_budget(reply):
            filename = PROFILE_FILE if field == "profile_update" else MEMORY_FILE
            problems.append(f"{filename} update is {actual} characters, over its budget of {limit}; not written")
            reply[field] = ""
        return reply, problems

    def _over_budget(self, reply: dict[str, Any]) -> list[tuple[str, int, int]]:
        budgets = (("profile_update", self._memory.profile_max_chars), ("memory_update", self._memory.memory_max_chars))
        return [(f, len(reply[f].strip()), limit) for f, limit in budgets if len(reply[f].strip()) > limit]

    async def _write(
        self, agent_id: int, conversation_id: str, snap: _Snapshot, reply: dict[str, Any],
        problems: list[str], end: int,
    ) -> AnalysisOutcome:
        """Apply a parsed reply: replacements first, the daily note last, then the watermark.

        The daily append is the one write that is not idempotent, so it goes last and the
        watermark follows it at once: a failure before it leaves nothing to duplicate, and
        a retry of the replacements merges into what was already written.
        """
        reason = reply["reason"].strip() or ("nothing worth keeping" if not reply["should_update"] else "updated")
        daily_name = daily_note_name(snap.date)
        planned: dict[str, tuple[str, int]] = {}
        if reply["should_update"]:
            for filename, field, (_, version) in ((PROFILE_FILE, "profile_update", snap.profile),
                                                  (MEMORY_FILE, "memory_update", snap.memory),
                                                  (daily_name, "daily_entry", snap.daily)):
                if reply[field].strip():
                    planned[filename] = (reply[field].strip(), version)
        # Check every version before the first write, so the usual conflict (an edit made
        # while the model was thinking) is found with nothing written yet.
        for filename, (_, version) in planned.items():
            current = (await self._workspace.read_text(agent_id, filename))[1]
            if current != version:
                raise VersionConflict(filename, version, current)
        for filename, (text, version) in planned.items():
            if filename == daily_name:
                await self._workspace.append(agent_id, filename, text, header=f"# {snap.date}",
                                             expected_version=version)
            else:
                await self._workspace.write(agent_id, filename, text + "\n", expected_version=version,
                                            enabled=True, sort_order=_SORT_ORDER[filename])
        await self._repos.conversations.set_memory_watermark(conversation_id, end)
        written = tuple(planned)
        log.info("memory extraction for %s wrote %s: %s", conversation_id, ", ".join(written) or "nothing",
                 reason, extra={"conversation_id": conversation_id})
        if problems:
            return AnalysisOutcome("failed", bool(written), "; ".join(problems), written, end)
        return AnalysisOutcome("completed", bool(written), reason, written, end)
