"""The cost bench's day scenario: one person's real day through the whole pipeline, billed as the API bills it.

What: `--messages` (40) user messages in `--sessions` (5) sessions of one console conversation
with a long past, through the real runtime (router, agent, window, the memory worker with its
defaults: extraction after 10 quiet minutes, at most one per 5-minute cooldown; compaction when the
window asks for it) and the nightly memory job at
02:00 as the daemon runs it by default (the agent reviewing its daily notes with its tools),
against the fake Messages API of tests/ answered by a scripted model (bench/cost_day_model.py).
Everything runs on one simulated clock (bench/sim_clock.py): the daemon's clock and sleeps and
the fake's cache clock, so caches expire, pauses and cooldowns end as the gaps say.

The day (seeded): sessions start 1-3 hours apart (log-uniform), messages inside a session
30 s - 15 min apart (log-uniform; about a third of them longer than the 5-minute cache), from
07:30. At the start: PROFILE.md and MEMORY.md at 70 % of their budgets, daily notes for the six
days before, and `--history-tokens` (48 000) of earlier conversation already analysed by
extraction: half of the 96 000 at which the window compacted when the baseline was measured,
where a day of a long-running chat was on average then. `--start folded` (the default): that past
is summarised up to its last two exchanges, as the daemon's quiet fold leaves a conversation the
evening before (window.fold-after-quiet-minutes); `--start backlog`: all of it unfolded, as the
code before quiet folds left it (the first message of the day then compacts it, uncached). User messages are 8-20 words, about half of them with a new
fact (a profile, project or one-off fact, as in bench/memory_soak); answers are 60-150 words.

Billed-equivalent tokens: uncached input x1, 5-minute cache writes x1.25, 1-hour writes x2,
cache reads x0.1, output x5 (Sonnet-class list prices: $3 / $15 per million), as the fake
reports each request's usage. The same day is run again with the fake's cache off for
`cost_ratio`. `memory_share`: extraction, the nightly job and compaction, plus the chat cache
re-writes memory causes (see bench/cost_bill.py), as a share of the whole bill.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import statistics
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from bench._common import make_config, sentence
from bench.cost_bill import bill_day
from bench.cost_day_model import Answered, DayModel, PlantedFact
from bench.memory_soak_facts import FactMaker
from bench.sim_clock import SimClock
from bot.conversation.agents import EMERGENCE_JOB_NAME
from bot.core.config.agents import QUIET_FOLD_MINUTES
from bot.schedule.system_tasks import SystemTaskRunner
from bot.app.runtime import Runtime, open_runtime
from bot.core.records import ConversationRecord
from channels.base import InboundMessage
from memory.workspace.service import MEMORY_FILE, PROFILE_FILE, daily_note_name
from tests.support.fakes.anthropic_billing import estimate_tokens as api_tokens

START = datetime(2026, 3, 4, 7, 30, tzinfo=timezone.utc)  # a Wednesday, 07:30; the bench's zone is UTC
REVIEW_HOUR = 2  # the default emergence-cron "0 2 * * *": the night after the day
INSIDE_GAP_S = (30.0, 900.0)
BETWEEN_GAP_S = (3600.0, 3 * 3600.0)
HISTORY_TOKENS = 48_000
# SPEC S34, "Cost targets restated" (S32's first targets were 0.4 x baseline, 0.35 and 0.15).
TARGET = "vs_baseline <= 0.15, memory_share <= 0.30, cost_ratio <= 0.45 (burst: cost_ratio <= 0.25)"
FILES_SHARE = 0.70
NOTE_DAYS = 6
AGENT_ID = 1
MESSAGE_FRAMING_TOKENS = 4  # what the fake adds per message
SETTLE_S = 120.0  # real seconds the worker may take to finish what a step started


@dataclass(frozen=True, slots=True)
class Turn:
    at: datetime
    text: str
    session: int


@dataclass(slots=True)
class DayRun:
    """One run of the day: every request answered, and what the daemon itself recorded."""

    answered: list[Answered]
    recorded_prompt_tokens: int  # mate_llm_usage: input + cache writes + reads, all calls
    recorded_output_tokens: int
    files_changed: int
    file_chars: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (start, end)


def _log_uniform(rng: random.Random, bounds: tuple[float, float]) -> float:
    low, high = bounds
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def plan_day(messages: int, sessions: int, seed: int) -> tuple[list[Turn], dict[str, PlantedFact]]:
    """The day's user messages, their moments and the facts they carry (seeded)."""
    schedule, words = random.Random(seed), random.Random(seed + 1)
    sizes = [1] * sessions
    for _ in range(messages - sessions):
        sizes[schedule.randrange(sessions)] += 1
    maker = FactMaker("en", words)
    facts: dict[str, PlantedFact] = {}
    turns: list[Turn] = []
    at = START
    for session, size in enumerate(sizes):
        if session:
            at += timedelta(seconds=_log_uniform(schedule, BETWEEN_GAP_S))
        for index in range(size):
            if index:
                at += timedelta(seconds=_log_uniform(schedule, INSIDE_GAP_S))
            text, fact = maker.user_message(at)
            if fact is not None:
                facts[fact.text] = PlantedFact(fact.text, fact.kind)
            turns.append(Turn(at, text, session))
    return turns, facts


def _message(text: str) -> InboundMessage:
    return InboundMessage("console", "owner", "owner", "owner", text)


def _bullets(maker: FactMaker, kind: str, budget: int, header: str) -> str:
    """`header` and dated bullets of `kind` facts (as extraction writes them), up to `budget` characters."""
    text = header
    day = START - timedelta(days=120)  # a line a day, oldest first
    while True:
        fact = maker.fact(day)
        if fact.kind != kind:
            continue
        line = f"\n- {day.date().isoformat()}: {fact.text}"
        if len(text) + len(line) + 1 > budget:
            return text + "\n"
        text += line
        day += timedelta(days=1)


async def _seed_state(rt: Runtime, conversation: ConversationRecord, rng: random.Random,
                      history_tokens: int, folded: bool) -> None:
    """Memory files at 70 %, the week's daily notes, and the conversation's past (already extracted);
    `folded`: summarised up to its last exchanges, as the evening's quiet fold leaves it."""
    memory = rt.core.config.mate.memory
    workspace = rt.core.workspace
    maker = FactMaker("en", rng)
    await workspace.write(AGENT_ID, PROFILE_FILE,
                          _bullets(maker, "profile", int(memory.profile_max_chars * FILES_SHARE), "# User profile\n"))
    await workspace.write(AGENT_ID, MEMORY_FILE,
                          _bullets(maker, "memory", int(memory.memory_max_chars * FILES_SHARE), "# Core memory\n"))
    for back in range(NOTE_DAYS, 0, -1):
        date = (START - timedelta(days=back)).date().isoformat()
        lines = [f"- {maker.fact(START - timedelta(days=back)).text}" for _ in range(rng.randint(6, 12))]
        await workspace.write(AGENT_ID, daily_note_name(date), f"# {date}\n\n" + "\n".join(lines) + "\n")
    rows: list[tuple[str, str, int]] = []
    total = 0  # as the API counts them (the fake's count), which the window calibrates itself to
    while total < history_tokens:
        user = maker.chatter(8, 20)
        answer = sentence(rng, rng.randint(60, 150))
        for role, text in (("user", user), ("assistant", answer)):
            rows.append((role, text, rt.tokens.count_text(text)))
            total += api_tokens(text) + MESSAGE_FRAMING_TOKENS
    if rows:
        ids = await rt.core.repos.messages.add_many(conversation.id, rows)
        await rt.core.repos.conversations.set_memory_watermark(conversation.id, ids[-1])
        kept = 2 * rt.core.config.mate.agent.conversation.window.preserve_recent_pairs
        if folded and len(ids) > kept:
            await rt.core.repos.conversations.set_summary(conversation.id, sentence(rng, 150), ids[-kept - 1])


async def run_day(turns: list[Turn], facts: dict[str, PlantedFact], *, cached: bool, seed: int,
                  history_tokens: int = HISTORY_TOKENS, api: str = "anthropic", folded: bool = True) -> DayRun:
    from tests.support.fakes.anthropic import FakeAnthropic
    from tests.support.fakes.openai_chat import FakeOpenAIChat

    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
    clock = SimClock(START - timedelta(hours=1))
    with tempfile.TemporaryDirectory(prefix="matebot-cost-day-") as tmp:
        async with FakeOpenAIChat() if api == "openai" else FakeAnthropic() as fake:
            fake.cache.enabled = cached
            fake.now = clock.seconds
            base_url = fake.base_url if isinstance(fake, FakeOpenAIChat) else fake.url
            # Without caching the daemon is told so too (`mate.llm.cache: off`): it then sends its
            # current memory files each turn and memory extraction its own, shorter prompt.
            config = make_config(Path(tmp), llm={"provider": "anthropic", "api": api, "api-key": "sk-bench",
                                                 "base-url": base_url, "max-retries": 0,
                                                 **({} if cached else {"cache": "off"})},
                                 # What `auto` picks on a hosted API, for which the fake (on 127.0.0.1) stands in.
                                 memory={"extraction-prompt": "chat" if api == "anthropic" else "own"},
                                 agent={"conversation": {"window": {
                                     "fold-after-quiet-minutes": QUIET_FOLD_MINUTES if api == "anthropic" else 0}}})
            model = DayModel(random.Random(seed + 2), dict(facts), config.mate.memory.memory_max_chars)
            fake.responder = model.respond
            # The daemon's time-keeping (the memory worker's cooldown and deferred runs,
            # extraction, consolidation, the agent's message times and the date in its prompt)
            # runs on the simulated clock.
            async with open_runtime(config, clock=clock, sleep=clock.sleep) as rt:
                services = rt.memory_services
                assert services is not None
                worker = services.worker
                first = _message(turns[0].text)
                conversation = await rt.router.conversation_for(first, await rt.router.agent_for(first))
                await _seed_state(rt, conversation, random.Random(seed + 3), history_tokens, folded)
                start_chars = await _file_chars(rt)

                async def settle() -> None:
                    # A step whose work did not finish would leave the next one on a different
                    # footing: the figures would be wrong, so the bench stops instead.
                    if not (await rt.router.drain(SETTLE_S) and await worker.drain(SETTLE_S)):
                        raise RuntimeError(f"the pipeline did not settle within {SETTLE_S:.0f} s")

                loop = asyncio.create_task(worker.run(), name="memory-worker")
                try:
                    for turn in turns:
                        await clock.advance_to(turn.at, settle)
                        await rt.router.handle(_message(turn.text))
                        await settle()
                    night = (turns[-1].at + timedelta(days=1)).replace(hour=REVIEW_HOUR, minute=0, second=0)
                    await clock.advance_to(night, settle)
                    jobs = [j for j in await rt.core.repos.tasks.system_tasks(AGENT_ID) if j.name == EMERGENCE_JOB_NAME]
                    runner = SystemTaskRunner(rt.router, services.emergence, rt.consolidation_turns,
                                              rt.core.repos.search_index)
                    for job in jobs:
                        await runner(job)
                    await settle()
                finally:
                    loop.cancel()
                    await asyncio.gather(loop, return_exceptions=True)
                end_chars = await _file_chars(rt)
                rows = await rt.core.repos.llm_usage.totals_since("1970")
    return DayRun(
        answered=model.answered,
        recorded_prompt_tokens=sum(r.prompt_tokens for r in rows),
        recorded_output_tokens=sum(r.output_tokens for r in rows),
        files_changed=model.files_changed,
        file_chars={name: (start_chars[name], end_chars[name]) for name in start_chars},
    )


async def _file_chars(rt: Runtime) -> dict[str, int]:
    return {name: len((await rt.core.workspace.read_text(AGENT_ID, name))[0]) for name in (PROFILE_FILE, MEMORY_FILE)}


def day_result(turns: list[Turn], cached: DayRun, uncached: DayRun, baseline: float) -> dict[str, Any]:
    """The day's JSON: cost per user message, against no caching and the baseline, and where it goes."""
    bill, plain = bill_day(cached.answered), bill_day(uncached.answered)
    messages = len(turns)
    per_message = bill.total / messages
    gaps = [(b.at - a.at).total_seconds() for a, b in zip(turns, turns[1:])]
    chat = bill.chat_prompt_tokens
    return {
        "bench": "cost",
        "scenario": "day",
        "cost_per_message_tokens": round(per_message),
        "cost_ratio": round(bill.total / plain.total, 4) if plain.total else None,
        "memory_share": round(bill.memory / bill.total, 4) if bill.total else None,
        "baseline_cost_per_message_tokens": baseline,
        "vs_baseline": round(per_message / baseline, 4) if baseline else None,
        "dollars_per_message": round(per_message * 3e-6, 4),  # $3 per million input-equivalent tokens
        "uncached_cost_per_message_tokens": round(plain.total / messages),
        "breakdown": {name: {"calls": b.calls, "input": b.input, "cache_write_5m": b.cache_write_5m,
                             "cache_write_1h": b.cache_write_1h, "cache_read": b.cache_read, "output": b.output,
                             "billed": round(b.billed), "per_message": round(b.billed / messages)}
                      for name, b in bill.purposes.items()},
        "memory_rewrites": {"requests": bill.rewrites.requests, "tokens": bill.rewrites.tokens,
                            "billed_extra": round(bill.rewrites.billed_extra),
                            "per_message": round(bill.rewrites.billed_extra / messages)},
        "chat_request_tokens_mean": round(statistics.fmean(chat)) if chat else 0,
        "chat_request_tokens_max": max(chat, default=0),
        "user_messages": messages,
        "sessions": len({t.session for t in turns}),
        "gaps_s": {"min": round(min(gaps, default=0)), "median": round(statistics.median(gaps)) if gaps else 0,
                   "max": round(max(gaps, default=0))},
        "gaps_over_5_min": sum(1 for g in gaps if g > 300),
        "extractions_changing_files": cached.files_changed,
        "memory_file_chars": {name: list(sizes) for name, sizes in cached.file_chars.items()},
        "recorded_matches_billed": (cached.recorded_prompt_tokens == sum(b.prompt_tokens for b in bill.purposes.values())
                                    and cached.recorded_output_tokens == sum(b.output for b in bill.purposes.values())),
        "target": TARGET,
    }
