"""MemoryEmergenceService: consolidates an agent's recent daily notes into MEMORY.md (SPEC S8)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from bot.core.clock import Clock, local_date, utc_now
from bot.core.config import MateConfig
from bot.core.errors import LLMError, VersionConflict
from bot.llm import LLMClient, LLMRequest
from bot.core.prompts import PromptLibrary
from bot.core.retry import MEMORY_MODEL_CALL, Backoff, Sleep, retrying
from bot.storage import Repositories
from memory.workspace.filenames import daily_note_part
from bot.core.text import storable
from memory.extraction.budgets import tokens_for_chars
from memory.extraction.edits import EditNotApplicable, apply_edits
from memory.extraction.json_reply import InvalidJsonReply, parse_memory_reply
from memory.workspace.service import DAILY_PREFIX, MEMORY_FILE, SEED_FILES, WorkspaceFileService

log = logging.getLogger(__name__)

RUN_KIND = "emergence"
JSON_ATTEMPTS = 3
_FIELDS = ("memory_content",)
_EDIT_FIELDS = ("memory_edits",)
# The JSON around a complete MEMORY.md, and the reason.
_REPLY_OVERHEAD_TOKENS = 512
_MEMORY_SORT_ORDER = dict(SEED_FILES)[MEMORY_FILE]

Status = Literal["completed", "skipped", "failed", "disabled", "proposed"]


@dataclass(frozen=True, slots=True)
class EmergenceOutcome:
    status: Status
    updated: bool
    reason: str


class Proposer(Protocol):
    """Reviewed consolidation: keeps a proposed file for the owner instead of writing it."""

    async def propose(self, agent_id: int, filename: str, base_version: int, before: str, after: str,
                      reason: str, run_id: int | None) -> bool: ...


class _Failed(Exception):
    """Ends a run as failed with a reason meant for the user (API msg, /memory emerge answer)."""


class _ModelCallFailed(_Failed):
    """The model call failed: the run is tried again as extraction's would be, then it fails."""


def _is_model_failure(exc: Exception) -> bool:
    return isinstance(exc, _ModelCallFailed)


class MemoryEmergenceService:
    """One emerge() call = one LLM consolidation (redone once on a concurrent edit) = one run row
    per attempt.

    A failed model call fails the attempt, as in extraction: its run row is finished as
    "attempt n/N" and the consolidation is tried again on a fresh read of the files, as the
    memory retry policy allows. Nothing is written before the model's reply is whole.
    """

    def __init__(
        self, config: MateConfig, repos: Repositories, workspace: WorkspaceFileService,
        llm: LLMClient, prompts: PromptLibrary, clock: Clock = utc_now, *,
        sleep: Sleep = asyncio.sleep, retry: Backoff = MEMORY_MODEL_CALL, review: Proposer | None = None,
    ) -> None:
        self._config = config
        self._review = review  # with mate.memory.emergence-review, what a consolidation proposes goes here
        self._memory = config.memory
        self._repos = repos
        self._workspace = workspace
        self._llm = llm
        self._prompts = prompts
        self._clock = clock
        self._sleep = sleep
        self._retry = retry

    @property
    def enabled(self) -> bool:
        return self._memory.emergence_enabled

    @property
    def proposes(self) -> bool:
        """Whether a consolidation proposes its MEMORY.md for the owner to approve instead of writing it."""
        return self._memory.emergence_review and self._review is not None

    async def emerge(self, agent_id: int) -> EmergenceOutcome:
        if not self._memory.emergence_enabled:
            # Not a run: nothing is recorded, so /status is not filled with nightly no-ops.
            return EmergenceOutcome("disabled", False, "memory emergence is disabled")
        tries = 0

        async def attempt() -> EmergenceOutcome:
            nonlocal tries
            tries += 1
            return await self._run(agent_id, tries)

        try:
            return await retrying(attempt, _is_model_failure, self._retry, sleep=self._sleep)
        except _ModelCallFailed as exc:
            log.error("emergence for agent %s gave up after %d attempts: %s", agent_id, tries, exc)
            return EmergenceOutcome("failed", False, str(exc))

    async def _run(self, agent_id: int, attempt: int) -> EmergenceOutcome:
        """One attempt, one run row; a failed model call is raised for emerge() to retry."""
        run_id = await self._repos.memory_runs.start(agent_id, RUN_KIND)
        try:
            outcome = await self._consolidate(agent_id, run_id, redo_on_conflict=True)
        except _ModelCallFailed as exc:
            of = f"/{self._retry.attempts}" if self._retry.attempts is not None else ""
            await self._repos.memory_runs.finish(run_id, "failed", f"attempt {attempt}{of}", str(exc))
            log.warning("emergence attempt %d%s failed for agent %s: %s", attempt, of, agent_id, exc)
            raise
        except _Failed as exc:
            outcome = EmergenceOutcome("failed", False, str(exc))
        except BaseException as exc:
            # Unexpected (database, cancellation): leave an honest row, let the caller see it.
            await self._repos.memory_runs.finish(run_id, "failed", error=f"{type(exc).__name__}: {exc}")
            raise
        error = outcome.reason if outcome.status == "failed" else None
        await self._repos.memory_runs.finish(run_id, outcome.status, outcome.reason, error)
        log.info("emergence for agent %s: %s (%s)", agent_id, outcome.status, outcome.reason)
        return outcome

    async def _consolidate(self, agent_id: int, run_id: int, *, redo_on_conflict: bool) -> EmergenceOutcome:
        notes = await self._daily_notes(agent_id)
        if not notes:
            return EmergenceOutcome("skipped", False, "no daily notes to consolidate")
        # Read with its version before the call, so a write made meanwhile is detected.
        memory_text, version = await self._workspace.read_text(agent_id, MEMORY_FILE)
        try:
            reply = await self._ask_model(notes, memory_text)
            if not reply["should_update"]:
                return EmergenceOutcome("completed", False, reply["reason"])
            content = reply["memory_content"]
            if not content.strip() and reply["memory_edits"]:
                content = apply_edits(memory_text, reply["memory_edits"], MEMORY_FILE)
            self._check_budget(content)
        except EditNotApplicable as exc:
            if not redo_on_conflict:
                raise _Failed(f"{exc}; nothing was written") from None
            return await self._consolidate(agent_id, run_id, redo_on_conflict=False)
        if not content.strip():
            # An empty replacement would wipe the memory; read it as "nothing to change".
            return EmergenceOutcome(
                "completed", False, "the model asked for an update but sent no memory_content; MEMORY.md is unchanged"
            )
        if content == memory_text:
            return EmergenceOutcome("completed", False, "the proposed MEMORY.md equals the current one")
        if self.proposes and self._review is not None:
            # Nothing is written: the owner approves (onto this version of MEMORY.md) or rejects it.
            await self._review.propose(agent_id, MEMORY_FILE, version, memory_text, storable(content),
                                       reply["reason"], run_id)
            return EmergenceOutcome("proposed", False, reply["reason"])
        try:
            await self._workspace.write(
                agent_id, MEMORY_FILE, storable(content), expected_version=version,
                enabled=True, sort_order=_MEMORY_SORT_ORDER, change="emergence", run_id=run_id,
            )
        except VersionConflict:
            if not redo_on_conflict:
                raise _Failed("MEMORY.md was changed by another writer during the run; nothing was written") from None
            log.info("MEMORY.md of agent %s changed during emergence; redoing on the fresh contents", agent_id)
            return await self._consolidate(agent_id, run_id, redo_on_conflict=False)
        return EmergenceOutcome("completed", True, reply["reason"])

    def _check_budget(self, content: str) -> None:
        budget = self._memory.memory_max_chars
        if len(content) > budget:
            raise _Failed(
                f"MEMORY.md would be {len(content)} characters, over the budget of {budget}, even after "
                "asking for a shorter version; nothing was written"
            )

    async def _daily_notes(self, agent_id: int) -> list[tuple[str, str]]:
        """(filename, content) of the non-blank daily notes of the most recent days, newest day
        first, each day's parts in order."""
        files = await self._workspace.list(agent_id, DAILY_PREFIX)
        # Only dated names, so memory/ideas.md and friends never take a day's place.
        dated = [(part, f.filename, f.content) for f in files
                 if (part := daily_note_part(f.filename)) is not None and f.content.strip()]
        days = sorted({date for (date, _), _, _ in dated}, reverse=True)[: self._memory.emergence_day_range]
        dated.sort(key=lambda note: (note[0][0], -note[0][1]), reverse=True)  # ISO dates sort as text
        return [(name, content) for (date, _), name, content in dated if date in days]

    async def _ask_model(self, notes: list[tuple[str, str]], memory_text: str) -> dict[str, Any]:
        budget = self._memory.memory_max_chars
        system = self._prompts.render("memory/emergence-system", memory_max_chars=budget)
        user = self._prompts.render(
            "memory/emergence-user",
            date=local_date(self._config.timezone, self._clock()),
            memory=memory_text, memory_chars=len(memory_text), memory_max_chars=budget,
            daily_notes="\n\n".join(f"### {name}\n{content.strip()}" for name, content in notes),
        )
        max_tokens = tokens_for_chars(budget, self._config.locale, memory_text) + _REPLY_OVERHEAD_TOKENS
        messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
        reply, raw = await self._ask_json(system, messages, max_tokens)
        length = self._result_length(reply, memory_text)
        if not reply["should_update"] or length <= budget:
            return reply
        # Over budget: never truncate silently; ask once for a shorter version.
        messages += [
            {"role": "assistant", "content": raw},
            {"role": "user", "content": self._prompts.render(
                "memory/over-budget", filename=MEMORY_FILE, actual_chars=length, max_chars=budget,
            )},
        ]
        reply, _ = await self._ask_json(system, messages, max_tokens)
        return reply

    @staticmethod
    def _result_length(reply: dict[str, Any], memory_text: str) -> int:
        if reply["memory_content"].strip() or not reply["memory_edits"]:
            return len(reply["memory_content"])
        try:
            return len(apply_edits(memory_text, reply["memory_edits"], MEMORY_FILE))
        except EditNotApplicable:
            return 0  # found again when the edits are applied, and redone then

    async def _ask_json(
        self, system: str, messages: list[dict[str, Any]], max_tokens: int,
    ) -> tuple[dict[str, Any], str]:
        """The parsed reply and its raw text; the same request is re-sent on invalid JSON, and
        a reply cut at max_tokens is asked again once in the edits form.

        An LLMError ends the attempt (_ModelCallFailed): emerge() retries it as extraction does.
        """
        problem = ""
        cut_off = False
        attempt = 0
        while attempt < JSON_ATTEMPTS:
            attempt += 1
            request = LLMRequest(model=self._config.llm.effective_memory_model, system=system, messages=messages,
                                 max_tokens=max_tokens, purpose="emergence")
            try:
                response = await self._llm.complete(request)
            except LLMError as exc:
                raise _ModelCallFailed(f"the model call failed: {exc}") from None
            if response.stop_reason == "max_tokens":
                if cut_off:
                    raise _Failed(f"the reply was cut off at max_tokens ({max_tokens}) twice; nothing was written")
                cut_off = True
                log.warning("emergence reply cut off at max_tokens (%d); asking for edits instead", max_tokens)
                messages = [*messages, {"role": "assistant", "content": response.text.strip() or "..."},
                            {"role": "user", "content": self._prompts.render(
                                "memory/cut-off", max_tokens=max_tokens, files=MEMORY_FILE,
                                edit_fields="memory_edits", replacement_fields="memory_content")}]
                attempt -= 1  # a cut-off is not a JSON attempt
                continue
            try:
                return parse_memory_reply(response.text, _FIELDS, _EDIT_FIELDS), response.text
            except InvalidJsonReply as exc:
                problem = str(exc)
                log.warning("emergence reply %s/%s is not valid JSON: %s", attempt, JSON_ATTEMPTS, problem)
        raise _Failed(f"invalid JSON from the model after {JSON_ATTEMPTS} attempts: {problem}")
