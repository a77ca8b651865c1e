"""What the memory soak counts: failed runs, file budgets, repeated daily bullets, recall and request growth."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bench.memory_soak_facts import START, Fact
from bench.memory_soak_model import Sample, is_bullet
from bot.app.core import Core
from memory.consolidation.emergence import MemoryEmergenceService
from memory.extraction.summarization import RUN_KIND, MemorySummarizationService
from memory.workspace.service import DAILY_PREFIX, MEMORY_FILE, PROFILE_FILE

AGENT_ID = 1
CONVERSATION = "web:soak"
WEEK = 7

_NOTE_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})\.md$")


@dataclass(slots=True)
class Tally:
    """What one phase (warm-up or measured days) saw."""

    extractions: int = 0
    failures: int = 0
    failed_extractions: int = 0
    failed_attempts: int = 0
    skipped_extractions: int = 0
    emergence_runs: int = 0
    emergence_updates: int = 0
    emergence_failures: int = 0
    max_budget_ratio: float = 0.0
    reasons: Counter[str] = field(default_factory=Counter)


@dataclass(slots=True)
class RunCursor:
    """The newest mate_memory_run id already looked at, across both phases."""

    last_id: int = 0


async def _measure_budgets(core: Core, tally: Tally) -> None:
    memory = core.config.mate.memory
    for filename, budget in ((PROFILE_FILE, memory.profile_max_chars), (MEMORY_FILE, memory.memory_max_chars)):
        text, _ = await core.workspace.read_text(AGENT_ID, filename)
        tally.max_budget_ratio = max(tally.max_budget_ratio, len(text) / budget)


async def _new_failed_rows(core: Core, tally: Tally, cursor: RunCursor, kind: str) -> int:
    """Failed mate_memory_run rows of `kind` written since the last look."""
    rows = [r for r in await core.repos.memory_runs.recent(AGENT_ID, limit=200) if r.id > cursor.last_id]
    cursor.last_id = max([cursor.last_id, *(r.id for r in rows)])
    failed = [r for r in rows if r.kind == kind and r.status == "failed"]
    for row in failed:
        tally.reasons[(row.error or row.reason or "?")[:80]] += 1
    return len(failed)


async def run_extraction(core: Core, service: MemorySummarizationService, tally: Tally, cursor: RunCursor,
                         upto: int) -> None:
    outcome = await service.analyze_and_update_memory(AGENT_ID, CONVERSATION, upto_message_id=upto)
    rows = await _new_failed_rows(core, tally, cursor, RUN_KIND)
    failed = outcome.status == "failed"
    tally.extractions += 1
    tally.failed_attempts += rows
    tally.failed_extractions += failed
    tally.skipped_extractions += outcome.status == "skipped"
    # A failure is counted once whether it shows as rows, as the outcome, or both.
    tally.failures += max(rows, int(failed))
    if failed and not rows:
        tally.reasons[outcome.reason[:80]] += 1
    await _measure_budgets(core, tally)


async def run_emergence(core: Core, service: MemoryEmergenceService, tally: Tally, cursor: RunCursor) -> None:
    outcome = await service.emerge(AGENT_ID)
    await _new_failed_rows(core, tally, cursor, "emergence")
    tally.emergence_runs += 1
    tally.emergence_updates += outcome.updated
    tally.emergence_failures += outcome.status == "failed"
    await _measure_budgets(core, tally)


@dataclass(frozen=True, slots=True)
class NoteCounts:
    """Daily-note bullets of one phase: repeats, all bullets, planted facts recorded."""

    duplicates: int = 0
    bullets: int = 0
    recorded: int = 0


async def count_daily_notes(core: Core, facts: dict[str, Fact], warmup_days: int
                            ) -> tuple[NoteCounts, NoteCounts]:
    """(warm-up, measured) counts over all daily notes.

    A bullet's first occurrence is the original; each later one (by note date) is a duplicate
    of the phase its note belongs to. A note whose name carries no date counts as measured.
    """
    occurrences: dict[str, list[int]] = {}
    for note in await core.workspace.list(AGENT_ID, DAILY_PREFIX):
        match = _NOTE_DATE.search(note.filename)
        day = (datetime.fromisoformat(match.group(1)).date() - START.date()).days if match else warmup_days
        for line in note.content.splitlines():
            if is_bullet(line.strip()):
                occurrences.setdefault(line.strip(), []).append(day)
    duplicates, bullets = [0, 0], [0, 0]
    for days in occurrences.values():
        days.sort()
        for index, day in enumerate(days):
            phase = int(day >= warmup_days)
            bullets[phase] += 1
            duplicates[phase] += index > 0
    recorded = [0, 0]
    for fact in facts.values():
        recorded[int(fact.day >= warmup_days)] += f"- {fact.text}" in occurrences
    warm, measured = (NoteCounts(duplicates[p], bullets[p], recorded[p]) for p in (0, 1))
    return warm, measured


RECALL_AGES_DAYS = (1, 7, 30)
RECALL_WINDOWS = (24_000, 96_000)  # today's working window, and the trigger it replaced
_MESSAGE_OVERHEAD = 4  # bot.llm.tokens.PER_MESSAGE_OVERHEAD


def _window_starts(tokens: list[int], limit: int, kept: int = 4) -> list[int]:
    """For each message index, the index of the oldest message still sent word for word when it
    is the new message: the window folds all but the last `kept` messages (two exchanges) once
    the conversation passes `limit` tokens, as the window manager does (the summary not counted)."""
    starts: list[int] = []
    start, used = 0, 0
    for index, count in enumerate(tokens):
        used += count + _MESSAGE_OVERHEAD
        if used > limit and index - kept > start:
            start = index - kept
            used = sum(t + _MESSAGE_OVERHEAD for t in tokens[start:index + 1])
        starts.append(start)
    return starts


async def measure_recall(core: Core, facts: dict[str, Fact], warmup_days: int, messages_per_day: int
                         ) -> dict[str, Any]:
    """Where a fact stated in the measured days is, when the user asks about it 1, 7 or 30 days
    (of this chat) later: in the words sent (the working window), in PROFILE.md / MEMORY.md (the
    system prompt; their state at the end of the run, so older asks are a lower bound), or
    only in the daily notes (reachable through memory search). The window's summary (300
    tokens) is not counted: it keeps a few lines, not days of facts."""
    rows = await core.repos.messages.after(CONVERSATION, 0, limit=1 << 30)
    tokens = [r.token_count for r in rows]
    files = "".join([(await core.workspace.read_text(AGENT_ID, name))[0] for name in (PROFILE_FILE, MEMORY_FILE)])
    notes = "".join(note.content for note in await core.workspace.list(AGENT_ID, DAILY_PREFIX))
    stated = [(index, facts[r.content]) for index, r in enumerate(rows)
              if r.role == "user" and r.content in facts and facts[r.content].day >= warmup_days]
    result: dict[str, Any] = {}
    for limit in RECALL_WINDOWS:
        starts = _window_starts(tokens, limit)
        by_age: dict[str, Any] = {}
        for age in RECALL_AGES_DAYS:
            asked = [(i, f) for i, f in stated if i + age * messages_per_day < len(rows)]
            if not asked:
                continue
            window = sum(1 for i, _ in asked if i >= starts[i + age * messages_per_day])
            in_files = sum(1 for _, f in asked if f.text in files)
            either = sum(1 for i, f in asked if i >= starts[i + age * messages_per_day] or f.text in files)
            in_notes = sum(1 for _, f in asked if f.text in notes)
            by_age[f"{age}d"] = {"asked": len(asked), "window": round(window / len(asked), 3),
                                 "files": round(in_files / len(asked), 3),
                                 "window_or_files": round(either / len(asked), 3),
                                 "daily_notes": round(in_notes / len(asked), 3)}
        result[str(limit)] = by_age
    return result


def request_growth(samples: list[Sample], start: int, end: int, size: Callable[[Sample], int]
                   ) -> tuple[float, float, float | None]:
    """(first-week mean, last-week mean, last over first) of one measure of the request sizes
    sent on days `start` .. `end` - 1."""
    week = min(WEEK, end - start)
    first = [size(s) for s in samples if start <= s[0] < start + week]
    last = [size(s) for s in samples if end - week <= s[0] < end]
    if not first or not last:
        return 0.0, 0.0, None
    first_mean, last_mean = statistics.fmean(first), statistics.fmean(last)
    return round(first_mean, 1), round(last_mean, 1), round(last_mean / first_mean, 3)
