"""What a user message costs: billed-equivalent tokens through the real pipeline, with prompt caching and without.

Two scenarios; `--scenario day` is the default.

day (bench/cost_day.py): one person's real day — 40 user messages in 5 sessions with seeded
gaps of 30 s to 3 h, a conversation with a long past (summarised up to its last exchanges, as the
evening's quiet fold leaves it; `--start backlog`: unfolded), memory files at 70 % of their budgets,
the default cooldown, extraction, compaction and the nightly memory review all billed, output
tokens at 5x input. It prints `cost_per_message_tokens`, `cost_ratio` (against the same day
without caching), `memory_share` and a breakdown per purpose, beside
`baseline_cost_per_message_tokens`, what the same day cost on the code the day bench was
first measured on (BASELINE below). The same day runs again on OpenAI-compatible Chat
Completions; its figures are under "openai" (cached reads billed x0.1, no cache writes).

burst: what prompt caching saves on one long, lively conversation, on both protocols. `--turns` (200) turns
through the real pipeline (router, window, agent, the Anthropic SDK) against the fake Messages
API of tests/, with memory extraction on (the memory worker runs after each exchange, cooldown
0). The fake bills as the real API does: input tokens counted from the request (tool
definitions as JSON, with the API's tool-use system prompt), cache writes for `cache_control`
prefixes of at least 1024 tokens, reads within the 5-minute lifetime. The same run is made
twice: with the cache, and with the fake's cache turned off (every token billed as uncached
input). Billed-equivalent input = uncached x1 + cache writes x1.25 + cache reads x0.1, summed
from mate_llm_usage. User messages of 20-60 words, answers of 60-150 words, `--gap` (30)
seconds between turns on the fake's cache clock (a gap over 5 minutes would expire the cache).
Every 10th extraction updates MEMORY.md, which changes the workspace part of the system prompt
as real memory growth does. The same burst runs again on OpenAI-compatible Chat Completions
(the fake of tests/support/fakes/openai_chat.py: automatic prefix caching from 1 024 tokens in
128-token steps, no cache writes billed); its figures are under "openai". Target (SPEC): cost_ratio <= 0.25 for chat calls. Not included:
output tokens, latency, compaction (200 turns stay under the default window's compaction
trigger; the JSON says how many tokens the last request had).

Run: `python -m bench.cost [--scenario day|burst] [--messages 40 --sessions 5] [--turns 200]`;
one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/cost.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import HostLoad, emit, make_config, quiet_logs, sentence
from bot.app.runtime import open_runtime
from bot.storage.usage import UsageTotals
from channels.base import InboundMessage


def _billed(rows: Sequence[UsageTotals], purpose: str) -> float:
    return sum(r.input_tokens + 1.25 * r.cache_creation_input_tokens + 0.1 * r.cache_read_input_tokens
               for r in rows if r.purpose == purpose)


async def _run(turns: int, gap: float, cached: bool, seed: int, api: str = "anthropic") -> dict[str, Any]:
    from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, system_text
    from tests.support.fakes.openai_chat import FakeOpenAIChat, messages_view

    rng = random.Random(seed)
    clock = [time.monotonic()]
    extractions = [0]

    def respond(recorded: RecordedRequest) -> Script:
        body = messages_view(recorded.body) if api == "openai" else recorded.body
        first = json.dumps((body.get("messages") or [{}])[0].get("content", ""), ensure_ascii=False)
        # An extraction's instructions: its own system prompt, or the first message after the chat's prefix.
        if any("long-term memory of a chat assistant" in text for text in (system_text(body), first)):
            extractions[0] += 1
            if extractions[0] % 10:
                return TextReply(json.dumps({"should_update": False, "reason": "small talk"}))
            fact = f"- The user mentioned {sentence(rng, 8)}"
            return TextReply(json.dumps({"should_update": True, "reason": "a new fact", "daily_entry": fact,
                                         "memory_update": "", "profile_update": "",
                                         "memory_edits": [{"append": fact}], "profile_edits": []}))
        return TextReply(sentence(rng, rng.randint(60, 150)))

    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
    with tempfile.TemporaryDirectory(prefix="matebot-cost-") as tmp:
        async with FakeOpenAIChat() if api == "openai" else FakeAnthropic() as fake:
            fake.cache.enabled = cached
            fake.now = lambda: clock[0]
            fake.responder = respond
            base_url = fake.base_url if isinstance(fake, FakeOpenAIChat) else fake.url
            config = make_config(Path(tmp), llm={"provider": "anthropic", "api": api, "api-key": "sk-bench",
                                                 "base-url": base_url, "max-retries": 0},
                                 # extraction-prompt: what `auto` picks on a hosted API (the fake on 127.0.0.1 stands in).
                                 memory={"cooldown-minutes": 0,
                                         "extraction-prompt": "chat" if api == "anthropic" else "own"})
            async with open_runtime(config) as rt:
                assert rt.memory_services is not None
                worker = rt.memory_services.worker
                loop = asyncio.create_task(worker.run(), name="memory-worker")
                try:
                    for _ in range(turns):
                        message = InboundMessage("console", "owner", "owner", "owner", sentence(rng, rng.randint(20, 60)))
                        await rt.router.handle(message)
                        await rt.router.drain(30)
                        await worker.drain(10)  # each turn's extraction runs before the next turn
                        clock[0] += gap
                finally:
                    loop.cancel()
                    await asyncio.gather(loop, return_exceptions=True)
                rows = await rt.core.repos.llm_usage.totals_since("1970")
    chat = next((r for r in rows if r.purpose == "chat"), None)
    return {"chat": _billed(rows, "chat"), "memory": _billed(rows, "memory"),
            "chat_calls": chat.calls if chat else 0, "chat_prompt_tokens": chat.prompt_tokens if chat else 0,
            "memory_calls": sum(r.calls for r in rows if r.purpose == "memory")}


# cost_per_message_tokens of `--scenario day` with its defaults (seed 7, 40 messages, 5 sessions,
# 48 000 tokens of history), measured once on the code the day bench was written against (commit
# 65d1cd8, before any change to the cost behaviour): what later changes are held against.
BASELINE_COST_PER_MESSAGE_TOKENS = 40_897


def _burst_on(api: str, turns: int, gap: float, seed: int) -> dict[str, Any]:
    with_cache = asyncio.run(_run(turns, gap, True, seed, api))
    without = asyncio.run(_run(turns, gap, False, seed, api))
    return {
        "cost_ratio": round(with_cache["chat"] / without["chat"], 4) if without["chat"] else None,
        "memory_cost_ratio": round(with_cache["memory"] / without["memory"], 4) if without["memory"] else None,
        "chat_billed_cached": round(with_cache["chat"]),
        "chat_billed_uncached": round(without["chat"]),
        "chat_calls": with_cache["chat_calls"],
        "memory_calls": with_cache["memory_calls"],
    }


def _burst(turns: int, gap: float, seed: int) -> dict[str, Any]:
    """The burst on the Anthropic protocol (the top-level figures) and on OpenAI-compatible Chat
    Completions (`openai`: the provider caches prefixes itself; cached reads billed x0.1, no writes)."""
    return {
        "bench": "cost",
        "turns": turns,
        **_burst_on("anthropic", turns, gap, seed),
        "openai": _burst_on("openai", turns, gap, seed),
        "turn_gap_s": gap,
        "target": "cost_ratio <= 0.25",
    }


def _day(messages: int, sessions: int, seed: int, history_tokens: int, start: str) -> dict[str, Any]:
    from bench.cost_day import day_result, plan_day, run_day

    started = time.perf_counter()
    turns, facts = plan_day(messages, sessions, seed)
    result: dict[str, Any] = {}
    for api in ("anthropic", "openai"):
        past = {"history_tokens": history_tokens, "folded": start == "folded"}
        cached = asyncio.run(run_day(turns, facts, cached=True, seed=seed, api=api, **past))
        uncached = asyncio.run(run_day(turns, facts, cached=False, seed=seed, api=api, **past))
        figures = day_result(turns, cached, uncached, BASELINE_COST_PER_MESSAGE_TOKENS)
        if api == "anthropic":
            result = figures
        else:  # the provider's own prefix cache: no writes billed, reads x0.1 (the targets are the Anthropic figures')
            result["openai"] = {key: figures[key] for key in (
                "cost_per_message_tokens", "vs_baseline", "cost_ratio", "memory_share",
                "uncached_cost_per_message_tokens",
                "breakdown", "chat_request_tokens_mean", "recorded_matches_billed")}
    result["history_tokens_at_start"] = history_tokens
    result["start"] = start
    result["seed"] = seed
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("day", "burst"), default="day")
    parser.add_argument("--messages", type=int, default=40, help="day: user messages")
    parser.add_argument("--sessions", type=int, default=5, help="day: sessions they come in")
    parser.add_argument("--history-tokens", type=int, default=48_000,
                        help="day: tokens of earlier conversation at the start")
    parser.add_argument("--start", choices=("folded", "backlog"), default="folded",
                        help="day: the past summarised up to its last exchanges, as a quiet evening leaves it "
                             "(folded), or all of it unfolded, as the code before quiet folds left it (backlog)")
    parser.add_argument("--turns", type=int, default=200, help="burst: turns")
    parser.add_argument("--gap", type=float, default=30.0, help="burst: seconds between turns on the cache clock")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.scenario == "day" and not 1 <= args.sessions <= args.messages:
        parser.error("--sessions must be between 1 and --messages")
    if args.history_tokens < 0 or args.turns < 1:
        parser.error("--history-tokens must be >= 0 and --turns >= 1")
    quiet_logs()
    load = HostLoad()
    if args.scenario == "burst":
        return emit(_burst(args.turns, args.gap, args.seed), load)
    return emit(_day(args.messages, args.sessions, args.seed, args.history_tokens, args.start), load)


if __name__ == "__main__":
    main()
