"""Throughput of N concurrent conversations against an LLM of fixed latency, versus the ideal.

What: N distinct chats (web, direct, agent 1), each holding 4 stored messages and one
exchange already made since start-up (an active chat: its window is cached), all send
`--messages` (default 10) messages, one after another within a chat, all chats at once.
The LLM answers after `--latency` (0.2 s).

ratio = achieved throughput / (N / latency), the throughput taken in steady state: each
chat's own rate after its first reply, (replies - 1) / (last - first reply time), summed
over the N chats, which all talk for the whole run. The first reply is left out because
N messages sent at the same instant queue for the CPU once; `whole_run_ratio` keeps it
(latency x messages / wall time). 1.0 means our pipeline added nothing to the latency.

`burst_ratio` is the harsher one-shot figure, reported next to it: each chat sends one
message to a cold start (nothing cached), all at the same instant; latency / wall time
until the last reply. It measures how fast a thundering herd drains, not throughput.

How: `--mode inprocess` (default) uses an in-process scripted LLMClient that sleeps the
latency, so it measures our pipeline only (router, window, SQLite, memory event);
`--mode http` runs the tests' FakeAnthropic HTTP server (same process and loop) with
that latency and the real AnthropicClient/SDK, so it also measures the SDK and HTTP.
`llm.max-concurrency` is set to max(N) (500) so the client's semaphore never queues
(it only applies to the SDK client). The memory worker is built: publish writes its
pending row; its consumer loop is not running. Real SQLite (WAL) in a temp dir.

Target (SPEC S18): ratio >= 0.95 at N = 500.

Run: `python -m bench.concurrency [--mode http] [--ns 1 10 100 500] [--messages 10]`;
one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/concurrency.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import HostLoad, ScriptedLLM, chat_rows, emit, make_config, quiet_logs, seed_conversation
from bot.app.runtime import Runtime, tune_garbage_collector, open_runtime
from channels.base import InboundMessage

NS = (1, 10, 100, 500)


@asynccontextmanager
async def _runtime(tmp: Path, mode: str, latency: float, concurrency: int) -> AsyncIterator[Runtime]:
    llm_config: dict[str, Any] = {"max-concurrency": concurrency}
    if mode == "inprocess":
        config = make_config(tmp, llm={**llm_config, "provider": "offline"})
        async with open_runtime(config, llm=ScriptedLLM(chat_latency=latency)) as rt:
            tune_garbage_collector()  # as the daemon does once started
            yield rt
        return
    from tests.support.fakes.anthropic import FakeAnthropic

    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
    async with FakeAnthropic(latency=latency, default_text="Sure, that sounds like a plan.") as fake:
        config = make_config(tmp, llm={**llm_config, "provider": "anthropic", "api-key": "sk-bench",
                                               "base-url": fake.url, "max-retries": 0})
        async with open_runtime(config) as rt:
            tune_garbage_collector()  # as the daemon does once started
            yield rt


def steady_throughput(completions: Sequence[tuple[int, int, float]]) -> tuple[float, float]:
    """(messages/s, mean seconds per message) from (chat, k, reply time) triples: each chat's
    own rate after its first reply, (its replies - 1) / (last - first reply time), summed."""
    spans: dict[int, list[float]] = {}
    for chat, _, finished in completions:
        spans.setdefault(chat, []).append(finished)
    rates = [(len(times) - 1) / (max(times) - min(times)) for times in spans.values() if len(times) > 1]
    total = sum(rates)
    return total, (len(rates) / total if total else 0.0)


async def run_concurrency(
    *, ns: Sequence[int] = NS, latency: float = 0.2, messages: int = 10, mode: str = "inprocess",
    seed: int = 11,
) -> dict[str, Any]:
    if messages < 2:
        raise ValueError("steady-state throughput needs at least 2 messages per conversation")
    rng = random.Random(seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="matebot-bench-") as tmp:
        async with _runtime(Path(tmp), mode, latency, max(ns)) as rt:
            repos = rt.core.repos
            for n in ns:
                for i in range(n):
                    await seed_conversation(repos, f"web:burst{n}-{i}", rows=chat_rows(4, rng, rt.tokens.count_text))
                    await seed_conversation(repos, f"web:n{n}-{i}", rows=chat_rows(4, rng, rt.tokens.count_text))

            async def say(chat_id: str, k: int) -> bool:
                reply = await rt.router.handle(InboundMessage(
                    channel="web", chat_id=chat_id, sender_id="owner", sender_name="Owner",
                    text=f"Message {k}: could you remind me what we planned for the weekend trip?",
                    trigger_source="web"))
                return reply is not None and bool(reply.text)

            completions: list[tuple[int, int, float]] = []

            async def talk(i: int, chat_id: str) -> int:
                answered = 0
                for k in range(messages):
                    answered += await say(chat_id, k)
                    completions.append((i, k, time.perf_counter()))
                return answered

            await say("warmup", 0)  # first-use costs (imports, prompt templates) are not N's
            for n in ns:
                start = time.perf_counter()
                burst = await asyncio.gather(*(say(f"burst{n}-{i}", 0) for i in range(n)))
                burst_wall = time.perf_counter() - start
                assert all(burst), f"only {sum(burst)} of {n} burst messages were answered"

                await asyncio.gather(*(say(f"n{n}-{i}", -1) for i in range(n)))  # active chats
                completions.clear()
                start = time.perf_counter()
                answered = await asyncio.gather(*(talk(i, f"n{n}-{i}") for i in range(n)))
                wall = time.perf_counter() - start
                assert sum(answered) == n * messages, f"only {sum(answered)} of {n * messages} were answered"
                per_s, cycle = steady_throughput(completions)
                ideal = n / latency
                results.append({"n": n, "ratio": round(per_s / ideal, 4), "msgs_per_s": round(per_s, 1),
                                "ideal_msgs_per_s": round(ideal, 1), "mean_cycle_ms": round(cycle * 1000, 2),
                                "whole_run_ratio": round(latency * messages / wall, 4),
                                "burst_ratio": round(latency / burst_wall, 4),
                                "burst_wall_s": round(burst_wall, 4)})
            max_in_flight = getattr(getattr(rt.llm, "inner", rt.llm), "max_in_flight", None)
    return {
        "bench": "concurrency",
        "llm_latency_s": latency,
        "results": results,
        "messages_per_conversation": messages,
        "llm": ("in-process ScriptedLLM sleeping the latency (our pipeline only)" if mode == "inprocess"
                else "FakeAnthropic over HTTP (same process) + real AnthropicClient/anthropic SDK"),
        "mode": mode,
        "llm_max_concurrency": max(ns),
        "llm_max_in_flight": max_in_flight,
        "memory_sink": "MemoryWorker built; publish writes mate_memory_pending; consumer loop not running",
        "target": "ratio >= 0.95 at n = 500",
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="bench.concurrency", description=__doc__.splitlines()[0])
    parser.add_argument("--ns", type=int, nargs="+", default=list(NS))
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--messages", type=int, default=10,
                        help="messages per conversation, sent in turn (at least 2)")
    parser.add_argument("--mode", choices=("inprocess", "http"), default="inprocess")
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    return emit(asyncio.run(run_concurrency(ns=args.ns, latency=args.latency, messages=args.messages,
                                            mode=args.mode)), load)


if __name__ == "__main__":
    main()
