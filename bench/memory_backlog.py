"""Reply latency while the memory worker drains a backlog of extractions, versus idle.

What: the round trip of `ChannelMessageRouter.handle()` for a probe chat (web, direct,
agent 1) whose LLM answers in 0 ms, measured three times with the memory worker's
consumer loop running (`asyncio.create_task(worker.run())`): idle (nothing queued),
busy (draining 200 extractions), and idle again after the drain.

How: 200 conversations of 6 messages with long user messages (so the S6 pre-checks
pass) get one ConversationCompletedEvent each through `worker.publish` (which records
the pending row and queues the agent); `memory.cooldown-minutes` and `idle-minutes` are 0
(the backlog is due at once, as after a restart or a long pause). The worker's LLM
calls (purpose "memory") take `--memory-latency` (50 ms) and return a JSON reply that
appends a daily-note line, so every extraction also writes to SQLite. All 200 belong to
agent 1, as in a single-owner deployment, so the worker analyses them one after another
(its per-agent lock), a drain of ~200 x 50 ms. Probe messages are spaced `--gap` apart
and are short (< 10 characters), so their own events are skipped by the pre-checks and
the idle case stays idle; the probe chat carries a compaction summary whose cut-off is
moved (untimed) before each probe so its window stays at the last 40 messages in all
three phases. `backlog_left_after_busy` shows the worker was still busy when
the busy measurement ended. Real SQLite (WAL) in a temp dir; in-process scripted LLM.

Target (SPEC S18): busy p99 <= 1.1 x idle p99.

Run: `python -m bench.memory_backlog [--samples 300]`; one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/memory_backlog.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    HostLoad, ScriptedLLM, chat_rows, emit, keep_window, make_config, ms, percentile, quiet_logs,
    seed_conversation,
)
from bot.app.runtime import Runtime, tune_garbage_collector, open_runtime
from channels.base import InboundMessage
from memory.events import ConversationCompletedEvent

PROBE_WINDOW = 40
PROBE_TEXTS = ("thanks!", "ok", "got it", "nice :)", "sure", "cool", "yes", "perfect", "great", "hmm")


async def _probe(rt: Runtime, samples: int, gap: float, rng: random.Random) -> list[float]:
    timings = []
    for _ in range(samples):
        await keep_window(rt.core.repos, "web:probe", PROBE_WINDOW, rt.window)
        message = InboundMessage(channel="web", chat_id="probe", sender_id="owner", sender_name="Owner",
                                 text=rng.choice(PROBE_TEXTS), trigger_source="web")
        start = time.perf_counter()
        reply = await rt.router.handle(message)
        timings.append(time.perf_counter() - start)
        assert reply is not None and reply.text, "the router gave no reply"
        await asyncio.sleep(gap)
    return timings


def _stats(timings: list[float]) -> dict[str, float]:
    return {"p50_ms": ms(percentile(timings, 50)), "p99_ms": ms(percentile(timings, 99)),
            "mean_ms": ms(statistics.fmean(timings))}


async def run_memory_backlog(
    *, backlog: int = 200, samples: int = 300, gap: float = 0.01, memory_latency: float = 0.05,
    drain_timeout: float = 90.0, seed: int = 5,
) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="matebot-bench-") as tmp:
        config = make_config(Path(tmp), memory={"cooldown-minutes": 0, "idle-minutes": 0})
        llm = ScriptedLLM(chat_latency=0.0, memory_latency=memory_latency)
        async with open_runtime(config, llm=llm, with_memory_worker=True) as rt:
            tune_garbage_collector()  # as the daemon does once started
            repos = rt.core.repos
            worker = rt.memory_services.worker
            events = []
            for i in range(backlog):
                rows = chat_rows(6, rng, rt.tokens.count_text)
                ids = await seed_conversation(repos, f"web:backlog-{i}", rows=rows)
                events.append((ConversationCompletedEvent(
                    agent_id=1, conversation_id=f"web:backlog-{i}", user_message=rows[-2][1],
                    assistant_reply=rows[-1][1], message_count=len(rows), trigger_source="web"), ids[-1]))
            await seed_conversation(repos, "web:probe", rows=chat_rows(60, rng, rt.tokens.count_text))
            loop_task = asyncio.create_task(worker.run(), name="memory-worker")
            try:
                await _probe(rt, 10, gap, rng)  # warm-up
                idle = await _probe(rt, samples, gap, rng)

                calls_before = llm.calls.get("memory", 0)
                started = time.perf_counter()
                for event, upto in events:
                    await worker.publish(event, upto)
                busy = await _probe(rt, samples, gap, rng)
                busy_s = time.perf_counter() - started
                left = len(await repos.memory_pending.all())
                analysed_during_busy = llm.calls.get("memory", 0) - calls_before
                drained = await worker.drain(drain_timeout)
                drain_s = time.perf_counter() - started
                left_at_end = len(await repos.memory_pending.all())

                idle_after = await _probe(rt, samples, gap, rng)
            finally:
                loop_task.cancel()
                await asyncio.gather(loop_task, return_exceptions=True)
            runs = await repos.memory_runs.recent(1, limit=10 * backlog)
    idle_s, busy_stats, after = _stats(idle), _stats(busy), _stats(idle_after)
    return {
        "bench": "memory_backlog",
        "idle_p99_ms": idle_s["p99_ms"],
        "busy_p99_ms": busy_stats["p99_ms"],
        "idle_p50_ms": idle_s["p50_ms"],
        "busy_p50_ms": busy_stats["p50_ms"],
        "idle_after_p50_ms": after["p50_ms"],
        "idle_after_p99_ms": after["p99_ms"],
        "busy_over_idle_p99": round(busy_stats["p99_ms"] / idle_s["p99_ms"], 3) if idle_s["p99_ms"] else None,
        "busy_over_idle_p50": round(busy_stats["p50_ms"] / idle_s["p50_ms"], 3) if idle_s["p50_ms"] else None,
        "samples": samples,
        "gap_ms": ms(gap),
        "backlog": backlog,
        "memory_llm_latency_s": memory_latency,
        "busy_window_s": round(busy_s, 2),
        "analysed_during_busy_window": analysed_during_busy,
        "backlog_left_after_busy": left,
        "drained": drained and left_at_end == 0,
        "drain_s": round(drain_s, 2),
        "memory_llm_calls": llm.calls.get("memory", 0),
        "memory_runs_completed": sum(1 for r in runs if r.status == "completed"),
        "llm": "in-process ScriptedLLM: chat 0 ms, memory extraction sleeps memory_llm_latency_s",
        "target": "busy_p99 <= 1.1 x idle_p99",
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="bench.memory_backlog", description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=200)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--gap", type=float, default=0.01, help="seconds between probe messages")
    parser.add_argument("--memory-latency", type=float, default=0.05)
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    return emit(asyncio.run(run_memory_backlog(backlog=args.backlog, samples=args.samples, gap=args.gap,
                                               memory_latency=args.memory_latency)), load)


if __name__ == "__main__":
    main()
