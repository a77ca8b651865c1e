"""What prompt caching saves: billed-equivalent input tokens of one long conversation.

What: one conversation of `--turns` (200) turns through the real pipeline (router,
window, agent, the Anthropic SDK) against the fake Messages API of tests/, with memory
extraction on (the memory worker runs after each exchange, cooldown 0). The fake bills
as the real API does: input tokens counted from the request, cache writes for
`cache_control` prefixes of at least 1024 tokens, reads within the 5-minute lifetime.
The same run is made twice: with the cache, and with the fake's cache turned off (every
token billed as uncached input). Billed-equivalent input = uncached x1 + cache writes
x1.25 + cache reads x0.1, summed from mate_llm_usage.

How: user messages of 20-60 words, answers of 60-150 words, `--gap` (30) seconds
between turns on the fake's cache clock (a lively chat; a gap over 5 minutes would
expire the cache). Every 10th extraction updates MEMORY.md, which changes the
workspace part of the system prompt as real memory growth does.

Target (SPEC): cost_ratio <= 0.25 for chat calls. Not included: output tokens (the same
with and without caching), latency, compaction (200 turns stay under the default
window's compaction trigger; the JSON says how many tokens the last request had).

Run: `python -m bench.cost [--turns 200]`; one JSON line on stdout.
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
from bot.runtime import open_runtime
from channels.base import InboundMessage


def _billed(rows: Sequence[Any], purpose: str) -> float:
    return sum(r.input_tokens + 1.25 * r.cache_creation_input_tokens + 0.1 * r.cache_read_input_tokens
               for r in rows if r.purpose == purpose)


async def _run(turns: int, gap: float, cached: bool, seed: int) -> dict[str, Any]:
    from tests.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply

    rng = random.Random(seed)
    clock = [time.monotonic()]
    extractions = [0]

    def respond(recorded: RecordedRequest) -> Script:
        system = json.dumps(recorded.body.get("system", ""))
        if "long-term memory of a chat assistant" in system:
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
        async with FakeAnthropic() as fake:
            fake.cache.enabled = cached
            fake.now = lambda: clock[0]
            fake.responder = respond
            config = make_config(Path(tmp), llm={"provider": "anthropic", "api-key": "sk-bench",
                                                 "base-url": fake.url, "max-retries": 0},
                                 memory={"cooldown-minutes": 0})
            async with open_runtime(config) as rt:
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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--gap", type=float, default=30.0, help="seconds between turns on the cache clock")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    with_cache = asyncio.run(_run(args.turns, args.gap, True, args.seed))
    without = asyncio.run(_run(args.turns, args.gap, False, args.seed))
    result = {
        "bench": "cost",
        "turns": args.turns,
        "cost_ratio": round(with_cache["chat"] / without["chat"], 4) if without["chat"] else None,
        "memory_cost_ratio": round(with_cache["memory"] / without["memory"], 4) if without["memory"] else None,
        "chat_billed_cached": round(with_cache["chat"]),
        "chat_billed_uncached": round(without["chat"]),
        "chat_calls": with_cache["chat_calls"],
        "memory_calls": with_cache["memory_calls"],
        "turn_gap_s": args.gap,
        "target": "cost_ratio <= 0.25",
    }
    return emit(result, load)


if __name__ == "__main__":
    main()
