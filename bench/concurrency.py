"""Throughput of N concurrent conversations against an LLM of fixed latency, versus the ideal.

What: N distinct chats (web, direct, agent 1), each already holding 4 stored messages,
send `--messages` (default 1) message(s) each, one after another within a chat, all
chats at once. The LLM answers after `--latency` (0.2 s). ratio = achieved messages/s
divided by the ideal N / latency, i.e. latency x messages / wall time; 1.0 means our
pipeline added nothing to the LLM's wall time.

How: `--mode inprocess` (default) uses an in-process scripted LLMClient that sleeps the
latency, so it measures our pipeline only (router, window, SQLite, memory event);
`--mode http` runs the tests' FakeAnthropic HTTP server (same process and loop) with
that latency and the real AnthropicClient/SDK, so it also measures the SDK and HTTP.
`llm.max-concurrency` is set to max(N) (500) so the client's semaphore never queues
(it only applies to the SDK client). The memory worker is built: publish writes its
pending row; its consumer loop is not running. Real SQLite (WAL) in a temp dir.

Target (SPEC S18): ratio >= 0.95 at N = 500.

Run: `python -m bench.concurrency [--mode http] [--ns 1 10 100 500]`; one JSON line on stdout.
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
from bot.runtime import Runtime, open_runtime
from channels.base import InboundMessage

NS = (1, 10, 100, 500)


@asynccontextmanager
async def _runtime(tmp: Path, mode: str, latency: float, concurrency: int) -> AsyncIterator[Runtime]:
    llm_config: dict[str, Any] = {"max-concurrency": concurrency}
    if mode == "inprocess":
        config = make_config(tmp, llm={**llm_config, "provider": "offline"})
        async with open_runtime(config, llm=ScriptedLLM(chat_latency=latency)) as rt:
            yield rt
        return
    from tests.fakes.anthropic import FakeAnthropic

    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
    async with FakeAnthropic(latency=latency, default_text="Sure, that sounds like a plan.") as fake:
        config = make_config(tmp, llm={**llm_config, "provider": "anthropic", "api-key": "sk-bench",
                                               "base-url": fake.url, "max-retries": 0})
        async with open_runtime(config) as rt:
            yield rt


async def run_concurrency(
    *, ns: Sequence[int] = NS, latency: float = 0.2, messages: int = 1, mode: str = "inprocess",
    seed: int = 11,
) -> dict[str, Any]:
    rng = random.Random(seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="matebot-bench-") as tmp:
        async with _runtime(Path(tmp), mode, latency, max(ns)) as rt:
            repos = rt.core.repos
            for n in ns:
                for i in range(n):
                    await seed_conversation(repos, f"web:n{n}-{i}", rows=chat_rows(4, rng, rt.tokens.count_text))

            async def one_chat(chat_id: str) -> int:
                done = 0
                for k in range(messages):
                    reply = await rt.router.handle(InboundMessage(
                        channel="web", chat_id=chat_id, sender_id="owner", sender_name="Owner",
                        text=f"Message {k}: could you remind me what we planned for the weekend trip?",
                        trigger_source="web"))
                    done += reply is not None and bool(reply.text)
                return done

            await one_chat("warmup")  # first-use costs (imports, prompt templates) are not N's
            for n in ns:
                start = time.perf_counter()
                answered = await asyncio.gather(*(one_chat(f"n{n}-{i}") for i in range(n)))
                wall = time.perf_counter() - start
                total = n * messages
                assert sum(answered) == total, f"only {sum(answered)} of {total} messages were answered"
                results.append({"n": n, "ratio": round(latency * messages / wall, 4), "wall_s": round(wall, 4),
                                "msgs_per_s": round(total / wall, 1), "ideal_msgs_per_s": round(n / latency, 1),
                                "overhead_ms_per_msg": round((wall - latency * messages) / total * 1000, 3)})
            max_in_flight = getattr(rt.llm, "max_in_flight", None)
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
    parser.add_argument("--messages", type=int, default=1, help="messages per conversation, sent in turn")
    parser.add_argument("--mode", choices=("inprocess", "http"), default="inprocess")
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    return emit(asyncio.run(run_concurrency(ns=args.ns, latency=args.latency, messages=args.messages,
                                            mode=args.mode)), load)


if __name__ == "__main__":
    main()
