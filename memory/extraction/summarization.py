"""MemorySummarizationService: unanalysed messages -> PROFILE.md, MEMORY.md and daily-note writes (SPEC S6, S7)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from bot.core.clock import Clock, local_date, utc_now
from bot.core.config import MateConfig
from bot.core.errors import LLMError, PromptTooLong, RequestRejected, VersionConflict
from bot.llm.chat_prefix import ChatPrefixes
from bot.llm import LLMClient
from bot.llm.offline import answers_offline
from bot.core.prompts import LOCALES, PromptLibrary
from bot.core.retry import MEMORY_MODEL_CALL, Backoff, Sleep, retrying
from bot.storage import Repositories
from bot.core.records import MessageRecord
from memory.events import CommitListener, ConversationCompletedEvent, FileChange, MemoryCommitted
from bot.storage.memory_commit import ExtractionCommit, FileWrite
from bot.core.text import last_chars, storable
from bot.core.content.remember import RememberRequests
from memory.extraction.asked import RememberRequest, keep_requests, remember_requests
from memory.extraction.budgets import tokens_for_chars
from memory.extraction.one_by_one import PeopleOneByOne, PersonLines, lines_by_member
from memory.extraction.corrections import Correction, PendingCorrections
from memory.extraction.edits import EditNotApplicable, Rejection, placeholder_lines
from memory.extraction.failures import CutOff, RetryableFailure, UnusableReply, is_retryable
from memory.extraction.frame import ExtractionFrame, own_frame, shared_frame, shares_chat_prompt
from memory.extraction.facts import linked_facts
from memory.workspace.filenames import daily_note_part
from memory.extraction.json_reply import InvalidJsonReply, parse_memory_reply
from memory.extraction.people_profiles import PEOPLE_FOLDER, Member, members_of
from memory.extraction.resolve import Plan, ReplyResolver, Target
from bot.core.content.transcript import TRANSCRIPT_ROLES, build_transcript
from memory.workspace.service import (
    MEMORY_FILE,
    PROFILE_FILE,
    SEED_FILES,
    WorkspaceFileService,
    appended_text,
    daily_note_name,
)

log = logging.getLogger(__name__)

RUN_KIND = "summarize"
OFFLINE_REASON = "offline mode: no model configured; these messages are extracted once one is"
REPLY_FIELDS = ("daily_entry", "memory_update", "profile_update")
EDIT_FIELDS = ("memory_edits", "profile_edits")
# A group's reply: MEMORY.md is the group's, and each member's profile is keyed by P1, P2...
GROUP_REPLY_FIELDS = ("daily_entry", "memory_update")
GROUP_EDIT_FIELDS = ("memory_edits",)
PEOPLE_UPDATES, PEOPLE_EDITS = "people_updates", "people_edits"
PERSON_SORT_ORDER = 100
# The JSON around the fields, and the reason.
_REPLY_OVERHEAD_TOKENS = 256
# A small model's group answer, at most: its people are asked about one by one besides.
SMALL_MODEL_GROUP_REPLY_TOKENS = 1536
# Already-analysed messages shown before the transcript so the model knows what the
# new lines refer to; short, since they must not be recorded again.
EARLIER_CONTEXT_MESSAGES = 6
EARLIER_CONTEXT_CHARS = 300
_SORT_ORDER = dict(SEED_FILES)
# What the provider answers to the request itself: the own prompt may be accepted where the
# chat's prefix was not (too long with the transcript, a server that knows no tool_choice none).
_REFUSED = (PromptTooLong, RequestRejected)


@dataclass(frozen=True, slots=True)
class AnalysisOutcome:
    status: str  # completed | skipped | failed
    updated: bool
    reason: str
    files: tuple[str, ...] = ()
    watermark: int = 0  # the conversation's memory_upto_message_id afterwards
    retryable: bool = False  # a failure that another attempt may not hit (LLM, JSON, conflicts)
    committed: MemoryCommitted | None = None  # a batch's committed changes, for the listener


@dataclass(frozen=True, slots=True)
class _Scope:
    """Which files one conversation's extraction may change: PROFILE.md and MEMORY.md in a
    direct chat; in a group MEMORY.md and the profile of each member of the transcript."""
    is_group: bool = False
    members: tuple[Member, ...] = ()  # a group's people of this batch (none when only the assistant spoke)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """The files as read before the LLM call: their versions guard the writes."""
    date: str
    files: dict[str, tuple[str, int]]  # the budgeted files: (content, version); version 0: none yet
    daily: tuple[str, int]
    daily_part: int = 1  # which part of the day's note `daily` is (the newest)

    def file(self, filename: str) -> tuple[str, int]:
        return self.files.get(filename, ("", 0))


class MemorySummarizationService:
    """Analyses a conversation in watermark-ordered batches; callers serialise per agent."""

    def __init__(
        self, config: MateConfig, repos: Repositories, workspace: WorkspaceFileService, llm: LLMClient,
        prompts: PromptLibrary, clock: Clock = utc_now, *, sleep: Sleep = asyncio.sleep,
        retry: Backoff = MEMORY_MODEL_CALL, listener: CommitListener | None = None,
        prefixes: ChatPrefixes | None = None, small_model: bool = False,
    ) -> None:
        self._config = config
        # A small model: a group's people asked one by one, its group answer kept short (a 1.5B model looped).
        self._one_by_one = PeopleOneByOne(llm, prompts, config.llm.effective_memory_model) if small_model else None
        self._listener = listener  # told what changed once a batch's transaction committed
        self._prefixes = prefixes  # the chats' cached prefixes a direct conversation's extraction reuses
        self._shares_chat_prompt = shares_chat_prompt(config)
        self._memory = config.memory
        self._repos = repos
        self._workspace = workspace
        self._llm = llm
        # The canned offline client reads nothing: an extraction by it would mark messages
        # analysed that no model ever saw, so they wait for a configured model instead.
        self.offline = answers_offline(llm)
        self._prompts = prompts
        self._clock = clock
        self._sleep = sleep
        if retry.attempts is None:
            raise ValueError("memory extraction needs a retry policy with a number of attempts")
        self._retry = retry
        # Every locale's words: a bilingual owner writes "记住 ..." to an English-locale bot too.
        self._requests = RememberRequests(self._memory.remember_keywords)
        self._no_change = frozenset(w.casefold() for locale in LOCALES for w in PromptLibrary(locale).words("no_change_words"))
        # The seeds' "_Nothing known yet._" lines, every locale's: replaced by the first fact.
        self._placeholders = placeholder_lines(
            PromptLibrary(locale).workspace_seed(name) for locale in LOCALES for name in (PROFILE_FILE, MEMORY_FILE))
        self._resolver = ReplyResolver(self._placeholders)
        self._corrections = PendingCorrections()

    # -- pre-checks ------------------------------------------------------------

    def is_explicit_remember(self, text: str) -> bool:
        return self._requests.asks(text)

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
        attempts: int | None = None, recheck: bool = False,
    ) -> AnalysisOutcome:
        """Analyse messages after the watermark up to `upto_message_id` (default: the last one).

        More than max-transcript-messages unanalysed messages are taken in consecutive
        batches, oldest first; the watermark moves after each batch, so a failure later on
        never repeats an earlier batch. `attempts` counts tries per batch, in process
        (default: the retry policy's).
        """
        conversation = await self._repos.conversations.get(conversation_id)
        if conversation is None or conversation.agent_id != agent_id:
            return await self._skip(agent_id, conversation_id, "no such conversation for this agent", 0)
        if self.offline:  # the watermark stays: a later start with a model extracts these messages
            return await self._skip(agent_id, conversation_id, OFFLINE_REASON, conversation.memory_upto_message_id)
        upto = upto_message_id if upto_message_id is not None else (
            await self._repos.messages.last_id(conversation_id)
        )
        watermark = conversation.memory_upto_message_id
        if recheck:  # an automatic run: the count the event was checked with may be stale
            problem = await self._recheck_count(conversation_id, watermark, upto)
            if problem:
                return await self._skip(agent_id, conversation_id, problem, watermark)
        limit = self._memory.max_transcript_messages
        files: list[str] = []
        reasons: list[str] = []
        problems: list[str] = []  # failures that moved the watermark (over budget): later batches still run
        while watermark < upto:
            rows = await self._repos.messages.oldest(
                conversation_id, limit + 1, after_id=watermark, upto_id=upto, roles=TRANSCRIPT_ROLES,
                remembered_only=True,
            )
            if not rows:  # only tool/system turns left: nothing to read, move past them
                await self._repos.conversations.set_memory_watermark(conversation_id, upto)
                watermark = upto
                break
            batch = rows[:limit]
            end = batch[-1].id if len(rows) > limit else upto
            scope = _Scope(True, members_of(batch, conversation.channel)) if conversation.is_group else _Scope()
            outcome = await self._batch(agent_id, conversation_id, scope, batch, watermark, end, attempts)
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

    async def _recheck_count(self, conversation_id: str, watermark: int, upto: int) -> str:
        """S6 step 1: the stored count, unless a new user message asks to be remembered."""
        minimum = self._memory.min_messages_for_summarize
        count = await self._repos.conversations.message_count(conversation_id)
        if count >= minimum:
            return ""
        new = await self._repos.messages.oldest(conversation_id, minimum, after_id=watermark, upto_id=upto,
                                                roles=("user",), remembered_only=True)
        if any(self.is_explicit_remember(m.content) for m in new):
            return ""
        return f"only {count} messages (minimum {minimum})"

    async def _skip(self, agent_id: int, conversation_id: str, reason: str, watermark: int) -> AnalysisOutcome:
        await self._repos.memory_runs.record(agent_id, RUN_KIND, "skipped", conversation_id=conversation_id,
                                            reason=reason)
        return AnalysisOutcome("skipped", False, reason, watermark=watermark)

    async def _batch(
        self, agent_id: int, conversation_id: str, scope: _Scope, batch: Sequence[MessageRecord], watermark: int,
        end: int, attempts: int | None,
    ) -> AnalysisOutcome:
        earlier = await self._repos.messages.latest(
            conversation_id, EARLIER_CONTEXT_MESSAGES, upto_id=watermark, roles=TRANSCRIPT_ROLES, remembered_only=True
        ) if watermark else []
        # Earlier lines keep the speaker's name ("[Alice] ..."): their people have no number.
        speakers = {m.sender_id: f"{m.ref} {m.name}" for m in scope.members}
        transcript = build_transcript(batch, self._prompts, self._memory.max_transcript_message_chars, speakers)
        earlier_text = build_transcript(earlier, self._prompts, EARLIER_CONTEXT_CHARS)
        requests = remember_requests(batch, self._requests, group=scope.is_group)
        people = lines_by_member(batch, scope.members) if self._one_by_one is not None else []
        policy = self._retry if attempts is None else replace(self._retry, attempts=max(1, attempts))
        tries = itertools.count(1)

        async def attempt() -> AnalysisOutcome:
            number = next(tries)
            run_id = await self._repos.memory_runs.start(agent_id, RUN_KIND, conversation_id)
            correction = self._corrections.get(conversation_id, watermark)
            try:
                # The run row is finished inside the attempt's commit when it succeeds.
                return await self._attempt(agent_id, conversation_id, scope, transcript, earlier_text, end, run_id,
                                           correction, requests, people, batch)
            except RetryableFailure as exc:
                self._corrections.remember(conversation_id, watermark, exc.correction or correction)
                await self._repos.memory_runs.finish(
                    run_id, "failed", reason=f"attempt {number}/{policy.attempts}", error=str(exc)
                )
                log.warning("memory extraction attempt %d/%d failed for %s: %s", number, policy.attempts,
                            conversation_id, exc, extra={"conversation_id": conversation_id})
                raise
            except BaseException as exc:  # never leave a run row "running" (cancellation included)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._repos.memory_runs.finish(run_id, "failed", error=repr(exc)))
                raise

        try:
            outcome = await retrying(attempt, is_retryable, policy, sleep=self._sleep)
        except RetryableFailure as exc:
            return AnalysisOutcome("failed", False, str(exc), retryable=True)
        self._corrections.forget(conversation_id)
        if outcome.committed is not None and self._listener is not None:
            try:  # committed already (and the run row finished): a receipt that cannot go out changes nothing
                await self._listener.committed(outcome.committed)
            except Exception:
                log.exception("telling what memory kept failed", extra={"conversation_id": conversation_id})
        return outcome

    async def _attempt(
        self, agent_id: int, conversation_id: str, scope: _Scope, transcript: str, earlier: str, end: int,
        run_id: int, correction: Correction | None = None, requests: Sequence[RememberRequest] = (),
        people: Sequence[PersonLines] = (), batch: Sequence[MessageRecord] = (),
    ) -> AnalysisOutcome:
        """One analysis; if a file changed during the LLM call it is redone once on fresh contents.
        A request through the chat's prefix that the provider refuses, or whose answer is not usable
        (not JSON, or edits of lines changed since the prefix), is asked again with the extraction's
        own prompt first (that does not use up the redo). `correction`: the answer an earlier try
        could not use, and why; sent after the prompt. `requests`: what the person explicitly asked
        to remember in the transcript; `people`: each member's lines, to be asked about one by one."""
        shared, redone = True, False
        while True:
            snapshot = await self._read_files(agent_id, scope)
            frame = self._shared_frame(scope, conversation_id, snapshot) if shared else None
            try:
                plan = await self._ask(scope, snapshot, transcript, earlier, frame or self._own_frame(scope),
                                       correction, requests, people)
                return await self._commit(agent_id, conversation_id, scope, snapshot, plan, end, run_id, batch)
            except (LLMError, InvalidJsonReply, CutOff, VersionConflict, EditNotApplicable) as exc:
                transient = isinstance(exc, LLMError) and not isinstance(exc, _REFUSED)
                if frame is not None and not transient:
                    log.info("memory extraction through the chat's prefix did not work (%s); asking with its own "
                             "prompt", exc, extra={"conversation_id": conversation_id})
                    shared = False
                    continue
                if isinstance(exc, (VersionConflict, EditNotApplicable)) and not redone:
                    log.info("memory extraction redone on fresh contents (%s)", exc,
                             extra={"conversation_id": conversation_id})
                    redone = True
                    continue
                if isinstance(exc, (VersionConflict, EditNotApplicable)):
                    raise RetryableFailure(f"failed again on fresh contents: {exc}") from None
                if isinstance(exc, UnusableReply):
                    raise RetryableFailure(f"{exc.kind}: {exc}", exc.correction) from None
                if isinstance(exc, CutOff):
                    note = self._cut_off_note(scope, self._max_tokens(scope, snapshot))
                    raise RetryableFailure(f"reply cut off: {exc}", Correction(exc.reply, note)) from None
                kind = "invalid JSON reply" if isinstance(exc, InvalidJsonReply) else "LLM error"
                # An error of the provider's: the next try carries the same correction, if any.
                raise RetryableFailure(f"{kind}: {exc}", correction) from None

    async def _read_files(self, agent_id: int, scope: _Scope) -> _Snapshot:
        zone = self._config.timezone  # "local" = the system's zone
        now = self._clock()
        date = local_date(zone, now)
        names = [t.filename for t in self._targets(scope)]
        parts = [found[1] for f in await self._workspace.list(agent_id, daily_note_name(date)[:-3])
                 if (found := daily_note_part(f.filename)) is not None and found[0] == date]
        part = max(parts, default=1)
        return _Snapshot(
            date=date,
            files={name: await self._workspace.read_text(agent_id, name) for name in names},
            daily=await self._workspace.read_text(agent_id, daily_note_name(date, part)),
            daily_part=part,
        )

    def _targets(self, scope: _Scope) -> list[Target]:
        memory = self._memory
        shared = Target(MEMORY_FILE, "memory_update", "memory_edits", memory.memory_max_chars)
        if not scope.is_group:
            return [Target(PROFILE_FILE, "profile_update", "profile_edits", memory.profile_max_chars), shared]
        return [shared, *(Target(m.filename, PEOPLE_UPDATES, PEOPLE_EDITS, memory.person_max_chars, m.ref,
                                  f"# {m.name}") for m in scope.members)]

    def _max_tokens(self, scope: _Scope, snap: _Snapshot) -> int:
        """Room for the largest reply the prompt allows: every file replaced at its budget,
        plus the daily entry and the reason."""
        memory, locale = self._memory, self._config.locale
        sample = "".join(content for content, _ in snap.files.values())
        budgets = sum(t.budget for t in self._targets(scope))
        files = tokens_for_chars(budgets, locale, sample)
        entry = max(memory.summary_max_tokens, tokens_for_chars(memory.daily_entry_max_chars, locale, sample))
        room = files + entry + _REPLY_OVERHEAD_TOKENS
        return min(room, SMALL_MODEL_GROUP_REPLY_TOKENS) if scope.is_group and self._one_by_one else room

    def _shared_frame(self, scope: _Scope, conversation_id: str, snap: _Snapshot) -> ExtractionFrame | None:
        """The conversation's chat prefix while it is in the provider's cache (direct chats only)."""
        if scope.is_group or self._prefixes is None or not self._shares_chat_prompt:
            return None
        prefix = self._prefixes.warm(conversation_id, self._config.llm.effective_memory_model, self._clock())
        if prefix is None:
            return None
        return shared_frame(prefix, {t.filename: snap.file(t.filename)[0] for t in self._targets(scope)})

    def _own_frame(self, scope: _Scope) -> ExtractionFrame:
        return own_frame(self._prompts, self._memory, self._config.llm.effective_memory_model, scope.is_group)

    async def _call(self, messages: list[dict[str, Any]], frame: ExtractionFrame, max_tokens: int) -> str:
        response = await self._llm.complete(frame.request(messages, max_tokens))
        if response.stop_reason == "max_tokens":
            raise CutOff(response.text, response.text)
        return response.text

    def _cut_off_note(self, scope: _Scope, max_tokens: int) -> str:
        if scope.is_group:
            files, edits, replacements = f"{MEMORY_FILE} / {PEOPLE_FOLDER}", GROUP_EDIT_FIELDS + (PEOPLE_EDITS,), (
                "memory_update", PEOPLE_UPDATES)
        else:
            files, edits, replacements = f"{PROFILE_FILE} / {MEMORY_FILE}", EDIT_FIELDS, REPLY_FIELDS[1:]
        return self._prompts.render("memory/cut-off", max_tokens=max_tokens, files=files,
                                    edit_fields=" / ".join(edits), replacement_fields=" / ".join(replacements))

    def _correction_note(self, *, problems: Sequence[str] = (), rejections: Sequence[Rejection] = (),
                         kept: bool = False, number: int = 1) -> str:
        """What was wrong with an answer, for the model: a field that did not parse, edits that missed."""
        return self._prompts.render("memory/correction", problems=list(problems), rejections=list(rejections),
                                    kept=kept, number=number)

    async def _complete(self, scope: _Scope, messages: list[dict[str, Any]], frame: ExtractionFrame,
                        max_tokens: int) -> str:
        """The reply's text; a reply cut at max_tokens is asked again once, in the edits form.

        `messages` grows by the exchange that produced the text, so a follow-up continues it.
        """
        try:
            return await self._call(messages, frame, max_tokens)
        except CutOff as cut:
            log.warning("memory reply cut off at max_tokens (%d); asking for edits instead", max_tokens)
            messages += [
                {"role": "assistant", "content": cut.reply.strip() or "..."},
                {"role": "user", "content": self._cut_off_note(scope, max_tokens)},
            ]
        try:
            return await self._call(messages, frame, max_tokens)
        except CutOff as again:
            raise CutOff(f"the reply was cut off at max_tokens ({max_tokens}) twice", again.reply) from None

    def _prompt(self, scope: _Scope, snap: _Snapshot, transcript: str, earlier: str, frame: ExtractionFrame,
                requests: Sequence[RememberRequest] = ()) -> str:
        """The extraction request's user message: a direct chat's, a group's with its people, or one
        through the chat's prefix (the instructions with it; the files are in the prefix)."""
        memory = self._memory
        daily, omitted = last_chars(snap.daily[0], memory.daily_context_chars)
        shared = {"date": snap.date, "memory": snap.file(MEMORY_FILE)[0], "memory_chars": len(snap.file(MEMORY_FILE)[0]),
                  "memory_max_chars": memory.memory_max_chars, "daily_note": daily, "daily_note_omitted": omitted,
                  "earlier_context": earlier, "transcript": transcript,
                  "asked_to_remember": "\n".join(r.listed() for r in requests)}
        if scope.is_group:
            people = [{"ref": m.ref, "name": m.name, "profile": snap.file(m.filename)[0],
                       "chars": len(snap.file(m.filename)[0])} for m in scope.members]
            return self._prompts.render("memory/summarize-group-user", people=people,
                                        person_max_chars=memory.person_max_chars, **shared)
        profile = snap.file(PROFILE_FILE)[0]
        if frame.shared:
            return self._prompts.render("memory/summarize-shared", instructions=self._own_frame(scope).system,
                                        changes=frame.changes, unshown=frame.unshown, profile_chars=len(profile),
                                        profile_max_chars=memory.profile_max_chars, **shared)
        return self._prompts.render("memory/summarize-user", profile=profile, profile_chars=len(profile),
                                    profile_max_chars=memory.profile_max_chars, **shared)

    def _parse(self, scope: _Scope, text: str) -> dict[str, Any]:
        """The reply's fields; in a group, people only by the numbers the prompt gave them."""
        if not scope.is_group:
            return parse_memory_reply(text, REPLY_FIELDS, EDIT_FIELDS, refuse_unknown=True, changes_win=True,
                                      no_change=self._no_change)
        reply = parse_memory_reply(text, GROUP_REPLY_FIELDS, GROUP_EDIT_FIELDS, keyed_text_fields=(PEOPLE_UPDATES,),
                                   changes_win=True, no_change=self._no_change,
                                   keyed_edit_fields=(PEOPLE_EDITS,),
                                   refused_fields=("profile_update", "profile_edits"), refuse_unknown=True)
        refs = [m.ref for m in scope.members]
        for key in (PEOPLE_UPDATES, PEOPLE_EDITS):
            unknown = sorted(set(reply[key]) - set(refs))
            if unknown:
                raise InvalidJsonReply(f"{key} names {', '.join(unknown)}, not one of the people listed "
                                       f"({', '.join(refs)})")
        return reply

    async def _ask(self, scope: _Scope, snap: _Snapshot, transcript: str, earlier: str,
                   frame: ExtractionFrame, correction: Correction | None = None,
                   requests: Sequence[RememberRequest] = (), people: Sequence[PersonLines] = ()) -> Plan:
        """The reply resolved into writes. Parts that missed (an edit whose text is not in the file)
        and budget problems are sent back once; what the second answer fixes is taken, the rest of
        the first is kept. A reply with nothing usable raises UnusableReply, with what to tell the
        model on the next try."""
        max_tokens = self._max_tokens(scope, snap)
        messages: list[dict[str, Any]] = [{"role": "user", "content": self._prompt(scope, snap, transcript, earlier,
                                                                                  frame, requests)}]
        if correction is not None:  # after the prompt, so the cached part of the request stays as it was
            messages += correction.turns()
        number = correction.number + 1 if correction is not None else 1
        try:
            text = await self._complete(scope, messages, frame, max_tokens)
            plan = self._resolve(scope, snap, self._parse_or_correct(scope, text, number), frame)
        except (CutOff, UnusableReply) as exc:
            if not people:  # a small model's group: its people are still asked about one by one
                raise
            log.info("the group's memory answer was not usable (%s); asking about its people alone", exc)
            plan, text = Plan(False, "the group answer was not usable", {}, ""), ""
        feedback = self._feedback(scope, plan)
        if plan.rejected:
            feedback.insert(0, self._correction_note(rejections=plan.rejected, kept=True))
        if plan.should_update and feedback:
            # Never truncate or drop silently: ask once, keeping the first answer if the second is no better.
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "\n\n".join(feedback)}]
            try:
                text = await self._call(messages, frame, max_tokens)
                again = self._parse(scope, text)
                second = self._resolve(scope, snap, again, frame)
            except (InvalidJsonReply, EditNotApplicable, CutOff, LLMError) as exc:
                log.info("the memory model's corrected answer was not usable: %s", exc)
            else:
                self._resolver.take_corrections(self._targets(scope), self._texts(scope, snap), plan, again)
                self._take_fixes(scope, plan, second)
        if plan.should_update and plan.rejected and not plan.contents and not plan.daily_entry:
            problem = "; ".join(str(r) for r in plan.rejected)
            raise UnusableReply("unusable reply", f"nothing usable: {problem}", Correction(
                text, self._correction_note(rejections=plan.rejected, number=number), number))
        plan.notes += [f"left out {r}" for r in plan.rejected]
        if self._one_by_one is not None and people:
            for person in people:  # a small model's group answer mixes up who said what: each alone counts
                plan.contents.pop(person.member.filename, None)
            await self._one_by_one.fill(plan, people, self._texts(scope, snap))
        self._enforce_budgets(scope, plan)
        keep_requests(plan, requests, memory_file=MEMORY_FILE, files=self._texts(scope, snap),
                      budget=self._memory.memory_max_chars, date=snap.date, placeholders=self._placeholders,
                      group=scope.is_group)
        return plan

    def _parse_or_correct(self, scope: _Scope, text: str, number: int) -> dict[str, Any]:
        try:
            return self._parse(scope, text)
        except InvalidJsonReply as exc:
            raise UnusableReply("invalid JSON reply", str(exc), Correction(
                text, self._correction_note(problems=[str(exc)], number=number), number)) from None

    def _resolve(self, scope: _Scope, snap: _Snapshot, reply: dict[str, Any], frame: ExtractionFrame) -> Plan:
        stale = {change.filename for change in frame.changes}
        return self._resolver.resolve(self._targets(scope), self._texts(scope, snap), reply, stale)

    def _texts(self, scope: _Scope, snap: _Snapshot) -> dict[str, str]:
        return {target.filename: snap.file(target.filename)[0] for target in self._targets(scope)}

    def _feedback(self, scope: _Scope, plan: Plan) -> list[str]:
        prompts: list[str] = []
        for target in self._targets(scope):
            size = len(plan.contents.get(target.filename, "").strip())
            if size > target.budget:
                prompts.append(self._prompts.render("memory/over-budget", filename=target.filename,
                                                    actual_chars=size, max_chars=target.budget))
        limit = self._memory.daily_entry_max_chars
        if len(plan.daily_entry) > limit:
            prompts.append(self._prompts.render("memory/shorten", field="daily_entry",
                                                actual_chars=len(plan.daily_entry), max_chars=limit))
        return prompts

    def _take_fixes(self, scope: _Scope, plan: Plan, second: Plan) -> None:
        """From the second answer, only what the first got wrong (files over budget, a long entry)."""
        for target in self._targets(scope):
            if len(plan.contents.get(target.filename, "").strip()) > target.budget:
                if target.filename in second.contents:
                    plan.contents[target.filename] = second.contents[target.filename]
                else:
                    del plan.contents[target.filename]
        if len(plan.daily_entry) > self._memory.daily_entry_max_chars and second.daily_entry:
            plan.daily_entry = second.daily_entry

    def _enforce_budgets(self, scope: _Scope, plan: Plan) -> None:
        for target in self._targets(scope):
            size = len(plan.contents.get(target.filename, "").strip())
            if size > target.budget:
                plan.problems.append(f"{target.filename} would be {size} characters, over its budget of "
                                     f"{target.budget}; not written")
                del plan.contents[target.filename]
        limit = self._memory.daily_entry_max_chars
        if len(plan.daily_entry) > limit:
            log.warning("daily entry of %d characters cut at %d", len(plan.daily_entry), limit)
            plan.notes.append(f"daily entry cut from {len(plan.daily_entry)} to {limit} characters")
            plan.daily_entry = plan.daily_entry[:limit].rstrip() + self._prompts.text("truncated_marker")

    async def _commit(
        self, agent_id: int, conversation_id: str, scope: _Scope, snap: _Snapshot, plan: Plan, end: int,
        run_id: int, batch: Sequence[MessageRecord] = (),
    ) -> AnalysisOutcome:
        """Every write of the batch in one transaction: files, watermark, pending row, run row, and
        the daily entry's facts linked to the messages of `batch` they came from.

        The versions read before the LLM call guard each file, so an edit made meanwhile
        raises VersionConflict with nothing written (and the batch is redone on it). A
        member's profile is not injected by its order: the group's prompt picks whose to show.
        """
        members = {m.filename for m in scope.members}
        writes = [FileWrite(filename, storable(content.strip() + "\n"), snap.file(filename)[1],
                            enabled=filename not in members,
                            sort_order=PERSON_SORT_ORDER if filename in members else _SORT_ORDER[filename])
                  for filename, content in plan.contents.items()]
        if plan.daily_entry:
            note, version = snap.daily
            part, header = snap.daily_part, f"# {snap.date}" if snap.daily_part == 1 else f"# {snap.date} ({snap.daily_part})"
            if note.strip() and len(note) + len(plan.daily_entry) + 2 > self._memory.daily_note_max_chars:
                # Full: the day goes on in a new part, so no write grows past the cap.
                note, version, part, header = "", 0, part + 1, f"# {snap.date} ({part + 1})"
            if note.strip():  # only the entry is written and indexed, not the note again
                added = appended_text(note, storable(plan.daily_entry))
                writes.append(FileWrite(daily_note_name(snap.date, part), note + added, version, appended=added))
            else:
                writes.append(FileWrite(daily_note_name(snap.date, part),
                                        storable(f"{header}\n\n{plan.daily_entry.strip()}\n"), version))
        status = "failed" if plan.problems else "completed"
        reason = "; ".join([*(plan.problems or [plan.reason]), *plan.notes])
        facts = linked_facts(storable(plan.daily_entry), batch) if plan.daily_entry else []
        await self._repos.memory_commits.commit(ExtractionCommit(
            agent_id, conversation_id, writes, end, run_id, status, reason, self._memory.history_versions, facts))
        written = tuple(w.filename for w in writes)
        if written:
            self._workspace.invalidate(agent_id)
        log.info("memory extraction for %s wrote %s: %s", conversation_id, ", ".join(written) or "nothing",
                 reason, extra={"conversation_id": conversation_id})
        committed = None
        if written:
            before = {**{name: text for name, (text, _) in snap.files.items()},
                      daily_note_name(snap.date, snap.daily_part): snap.daily[0]}
            changes = tuple(FileChange(w.filename, before.get(w.filename, ""), w.content) for w in writes)
            committed = MemoryCommitted(agent_id, conversation_id, run_id, changes)
        return AnalysisOutcome(status, bool(written), reason, written, end, committed=committed)

