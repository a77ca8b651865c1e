"""Sixty simulated days of memory extraction and nightly emergence against a scripted memory model.

What: whether automatic memory survives months of use (SPEC S19, S24): extraction runs that
fail, daily-note bullets recorded twice, PROFILE.md / MEMORY.md against their budgets, and
whether the extraction request stays bounded (its mean size in the last simulated week over
the first) once the install is in use, not while PROFILE.md / MEMORY.md fill up from empty.

How: a real SQLite database in a temp dir and the services built as the daemon builds them
(`open_core`, then MemorySummarizationService and MemoryEmergenceService over the same
repositories and workspace), with a simulated clock and an in-process scripted memory model
instead of the network. One web conversation gets `--messages-per-day` messages a day
(user and assistant alternating, stored through the message repository); after every
`--batch` messages `analyze_and_update_memory` runs with the clock at that moment of the
day, and every night at 02:00 `emerge` runs. About half the user messages carry a fact (a
unique sentence: a preference for PROFILE.md, a project detail for MEMORY.md, or a one-off
for the daily note only). The first `--warmup-days` simulated days (30 by default: a brand-new install whose
files fill up from the seed, so that the measured weeks start from a month of history) run
the same way, same model, same code path, before the
`--days` measured days; the metrics below count the measured days only.

The scripted model plays a well-behaved real one, so that every failure it sees comes from
the code under test: it reads the current files from the prompt (<profile>, <memory>) and
the new user lines from <transcript>, and answers the JSON of S6 with one daily bullet per
new fact, and one dated line per new durable fact for PROFILE.md / MEMORY.md. While a file
is small it sends the full replacement (old text + new lines); once it is large (30 % of its
budget) every other reply uses the S19 edits form instead (`memory_edits` / `profile_edits`:
appends, now and then an `old`/`new` update of an exact line, with `memory_update: ""`).
Near its budget (85 %) it condenses, dropping the oldest bullets to 65 % (in the edits form
as `{"old": "<line>\n", "new": ""}` deletions). Emergence answers `memory_content`, MEMORY.md
condensed to 60 % of its budget, once the file passes 70 %. Like the real API it obeys
`max_tokens`: the reply's tokens are estimated (CJK character ~1 token, other text ~4
characters per token) and a longer reply is cut there with `stop_reason="max_tokens"`. A
follow-up turn after a cut-off answer (the answer sent back is not JSON, or the follow-up
says "cut off" / "截断") is answered in the edits form; any other follow-up (over budget:
"shorter, please") with a harder condensation (50 %). Seeded: runs are repeatable.

Counted, over the measured days: `failures` (per extraction, the larger of its failed
`summarize` rows in mate_memory_run and 1 if its outcome failed), `duplicates` (daily-note
bullets that occur more than once across all daily notes, each repeat counted on the day of
the note it is in; every planted fact is unique), `max_budget_ratio` (largest size / budget
of PROFILE.md and MEMORY.md, read after every extraction and every emergence),
`request_growth` (mean characters of the extraction requests, system + messages, follow-ups
included, in the last measured week over the first measured week). Extras: the same in
tokens, the same without the two files (`request_growth_besides_files`), the same with the
warm-up included (`request_growth_from_empty`: the first warm-up week as the first week, so
the files filling up from empty), how many planted facts reached a daily note, and the
warm-up's own `warmup_failures` / `warmup_duplicates` / `warmup_max_budget_ratio`, so that
nothing the warm-up saw is hidden.

Targets (SPEC S24): failures 0, duplicates 0, max_budget_ratio <= 1, request_growth <= 1.5.

Run: `python -m bench.memory_soak [--days 60] [--warmup-days 30] [--messages-per-day 40]
[--locale en|zh-CN]`; one JSON line on stdout.

The parts: bench/memory_soak_facts.py (the planted facts), bench/memory_soak_model.py (the
scripted model, its clock and token counts), bench/memory_soak_tally.py (what is counted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import random
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/memory_soak.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import HostLoad, emit, make_config, quiet_logs
from bench.memory_soak_facts import Fact, FactMaker
from bench.memory_soak_model import ModelStats, SimClock, SoakModel, estimate_tokens
from bench.memory_soak_tally import (
    AGENT_ID,
    CONVERSATION,
    RunCursor,
    Tally,
    count_daily_notes,
    measure_recall,
    request_growth,
    run_emergence,
    run_extraction,
)
from bot.app.core import open_core
from bot.core.retry import MEMORY_MODEL_CALL
from memory.consolidation.emergence import MemoryEmergenceService
from memory.extraction.summarization import MemorySummarizationService
from memory.workspace.service import MEMORY_FILE, PROFILE_FILE

__all__ = ["FactMaker", "main", "run_memory_soak"]

FIRST_BATCH_HOUR = 8.0
LAST_BATCH_HOUR = 22.0
EMERGENCE_HOUR = 2.0  # the seeded emergence-cron "0 2 * * *", on the night after each day
NO_WAITS = replace(MEMORY_MODEL_CALL, base=0.0, maximum=0.0)  # the daemon's retries, without waiting


def _batch_rows(maker: FactMaker, facts: dict[str, Fact], day: datetime, count: int
                ) -> list[tuple[str, str, int]]:
    """`count` messages, user first; about half the user messages carry a new fact.

    Plain text rows (role, content, tokens): the stored content_format is then "text".
    """
    rows = []
    for index in range(count):
        if index % 2 == 0:
            text, fact = maker.user_message(day)
            if fact is not None:
                facts[text] = fact
            rows.append(("user", text, estimate_tokens(text)))
        else:
            text = maker.chatter(15, 40)
            rows.append(("assistant", text, estimate_tokens(text)))
    return rows


async def run_memory_soak(*, days: int = 60, warmup_days: int = 30, messages_per_day: int = 40, batch: int = 10,
                          locale: str = "en", seed: int = 7, memory_config: Mapping[str, object] | None = None
                          ) -> dict[str, Any]:
    """The soak; `memory_config` overrides mate.memory keys (kebab-case), for experiments."""
    rng = random.Random(seed)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="matebot-bench-") as tmp:
        config = make_config(Path(tmp), locale=locale, memory={"cooldown-minutes": 0, **(memory_config or {})})
        mate = config.mate
        clock = SimClock()
        facts: dict[str, Fact] = {}
        maker = FactMaker(locale, rng)
        async with open_core(config) as core:
            labels = [core.prompts.text("transcript_user"), "User: ", "用户: "]
            model = SoakModel(facts, profile_max=mate.memory.profile_max_chars,
                              memory_max=mate.memory.memory_max_chars, labels=labels, clock=clock, rng=rng)
            # As the daemon wires them (bot/app/runtime.py), with the bench's clock; retries without waiting.
            summarizer = MemorySummarizationService(mate, core.repos, core.workspace, model, core.prompts,
                                                    clock=clock, retry=NO_WAITS)
            emergence = MemoryEmergenceService(mate, core.repos, core.workspace, model, core.prompts, clock=clock,
                                               retry=NO_WAITS)
            await core.repos.conversations.create(CONVERSATION, agent_id=AGENT_ID, channel="web",
                                                  chat_key=CONVERSATION, trigger_source="web")
            warm, tally, cursor = Tally(), Tally(), RunCursor()
            warm_stats = model.stats
            batches = max(1, math.ceil(messages_per_day / batch))
            step = (LAST_BATCH_HOUR - FIRST_BATCH_HOUR) / max(1, batches - 1)
            for day in range(warmup_days + days):
                if day == warmup_days:  # the measured days start: the model counts afresh
                    model.stats = ModelStats()
                phase = warm if day < warmup_days else tally
                left = messages_per_day
                for index in range(batches):
                    clock.at(day, FIRST_BATCH_HOUR + index * step)
                    rows = _batch_rows(maker, facts, clock.now, min(batch, left))
                    left -= len(rows)
                    ids = await core.repos.messages.add_many(CONVERSATION, rows)
                    await run_extraction(core, summarizer, phase, cursor, ids[-1])
                clock.at(day + 1, EMERGENCE_HOUR)  # the night after `day`: still that day's phase
                await run_emergence(core, emergence, phase, cursor)
            warm_notes, notes = await count_daily_notes(core, facts, warmup_days)
            recall = await measure_recall(core, facts, warmup_days, messages_per_day)
            final_memory = len((await core.workspace.read_text(AGENT_ID, MEMORY_FILE))[0])
            final_profile = len((await core.workspace.read_text(AGENT_ID, PROFILE_FILE))[0])
    stats = model.stats
    samples = stats.memory_requests  # measured days only (day >= warmup_days)
    end = warmup_days + days
    first_chars, last_chars, growth = request_growth(samples, warmup_days, end, lambda s: s[1])
    _, _, growth_tokens = request_growth(samples, warmup_days, end, lambda s: s[2])
    # The two files may rightly fill up to their budgets; everything else should stay flat.
    _, _, growth_rest = request_growth(samples, warmup_days, end, lambda s: s[1] - s[3])
    # A brand-new install: the first warm-up week (empty files) as the first week.
    _, _, growth_from_empty = request_growth(warm_stats.memory_requests + samples, 0, end, lambda s: s[1])
    return {
        "bench": "memory_soak",
        "failures": tally.failures,
        "duplicates": notes.duplicates,
        "max_budget_ratio": round(tally.max_budget_ratio, 3),
        "request_growth": growth,
        "locale": locale,
        "days": days,
        "warmup_days": warmup_days,
        "messages": days * messages_per_day,
        "facts_planted": sum(1 for f in facts.values() if f.day >= warmup_days),
        "extractions": tally.extractions,
        "failed_extractions": tally.failed_extractions,
        "failed_attempts": tally.failed_attempts,
        "skipped_extractions": tally.skipped_extractions,
        "emergence_runs": tally.emergence_runs,
        "emergence_updates": tally.emergence_updates,
        "emergence_failures": tally.emergence_failures,
        "memory_llm_replies": stats.replies["memory"],
        "emergence_llm_replies": stats.replies["emergence"],
        "edits_replies": stats.edits_replies,
        "cut_replies": stats.cut_replies,
        "follow_up_requests": stats.follow_ups,
        "daily_bullets": notes.bullets,
        "facts_in_daily_notes": notes.recorded,
        "final_memory_chars": final_memory,
        "final_profile_chars": final_profile,
        "request_chars_first_week": first_chars,
        "request_chars_last_week": last_chars,
        "request_growth_tokens": growth_tokens,
        "request_growth_besides_files": growth_rest,
        "request_growth_from_empty": growth_from_empty,
        "failure_reasons": dict(tally.reasons.most_common(3)),
        # Facts asked about later, by conversation tokens sent word for word (working window).
        "recall_by_window_tokens": recall,
        # The warm-up is not measured, but nothing it saw is hidden.
        "warmup_failures": warm.failures,
        "warmup_duplicates": warm_notes.duplicates,
        "warmup_max_budget_ratio": round(warm.max_budget_ratio, 3),
        "warmup_emergence_failures": warm.emergence_failures,
        "warmup_failure_reasons": dict(warm.reasons.most_common(3)),
        "seconds": round(time.perf_counter() - started, 2),
        "llm": "in-process scripted memory model: reads the files from the prompt, obeys max_tokens",
        "target": "failures 0, duplicates 0, max_budget_ratio <= 1, request_growth <= 1.5 (measured days)",
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="bench.memory_soak", description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=60, help="measured days, after the warm-up")
    parser.add_argument("--warmup-days", type=int, default=30,
                        help="days run first, from an empty install, and not counted in the metrics")
    parser.add_argument("--messages-per-day", type=int, default=40, help="user and assistant, alternating")
    parser.add_argument("--batch", type=int, default=10, help="messages between two extractions")
    parser.add_argument("--locale", choices=("en", "zh-CN"), default="en")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.days < 1 or args.warmup_days < 0 or args.messages_per_day < 2 or args.batch < 2:
        parser.error("--days must be >= 1, --warmup-days >= 0, --messages-per-day and --batch >= 2")
    quiet_logs()
    load = HostLoad()
    with _quiet_memory_warnings():
        result = asyncio.run(run_memory_soak(days=args.days, warmup_days=args.warmup_days,
                                             messages_per_day=args.messages_per_day, batch=args.batch,
                                             locale=args.locale, seed=args.seed))
    return emit(result, load)


@contextlib.contextmanager
def _quiet_memory_warnings() -> Iterator[None]:
    """Each failed attempt logs a warning; the bench counts them (failures, failure_reasons)
    instead of printing hundreds of lines. Restored after, for a test process that goes on."""
    loggers = [logging.getLogger(name) for name in ("memory.extraction.summarization", "memory.consolidation.emergence")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


if __name__ == "__main__":
    main()
