"""Per-message pipeline overhead (router -> window -> store -> event) versus conversation length.

What: the round trip of `ChannelMessageRouter.handle()` for one web message and the
recording of its memory event (written just after the reply, so `router.drain()` is
awaited inside the timing; `reply_p50_ms` is the time to the reply alone), with the
LLM time taken out: the LLM is an in-process scripted client answering in 0 ms, the
database is a real SQLite file (WAL) in a temp dir, and the memory worker is built, so
`publish` runs its pre-checks and writes the `mate_memory_pending` row, but its consumer
loop is not running (no extraction competes with the measurement).

How: conversations of 10, 1,000 and 10,000 stored messages (alternating user/assistant,
~20-60 tokens each, inserted with `add_many`). The long ones carry a compaction summary
whose cut-off leaves the last `--window` (40) messages, as a real long conversation
would after S5 compaction; before each timed call the cut-off is moved (untimed) so the
window stays at that size instead of growing with the bench's own turns. The length-10
case uses a fresh pre-seeded 10-message chat for every call (no summary). After
`--warmup` calls per length, `--samples` timed calls per length are made, interleaved
across lengths.

Then the long chats again at a compaction-like cadence (cut-off moved every 10 calls),
so most turns find their window in the in-memory cache: `warm_p50_ms` / `warm_p99_ms`.

Target (SPEC S18): p50 <= 2 ms, and p50(10000) <= 1.2 x p50(10).

Run: `python -m bench.pipeline [--samples 200] [--profile 10000]`; one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/pipeline.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    HostLoad, ScriptedLLM, chat_rows, emit, keep_window, make_config, ms, percentile, quiet_logs,
    seed_conversation,
)
from bot.runtime import Runtime, tune_garbage_collector, open_runtime
from channels.base import InboundMessage

LENGTHS = (10, 1000, 10000)


def _message(chat_id: str, rng: random.Random) -> InboundMessage:
    words = " ".join(rng.choice(("plan", "coffee", "weekend", "train", "budget", "review")) for _ in range(12))
    return InboundMessage(channel="web", chat_id=chat_id, sender_id="owner", sender_name="Owner",
                          text=f"Could you help me with this: {words}?", is_direct=True, trigger_source="web")


async def drained(rt: Runtime) -> None:
    """The memory event is written just after the reply, off its path: wait for it too."""
    if not await rt.router.drain(5):
        raise RuntimeError("the memory event was not recorded within 5 s")


async def run_pipeline(
    *, samples: int = 200, warmup: int = 20, lengths: Sequence[int] = LENGTHS, window: int = 40,
    profile: int | None = None, seed: int = 7,
) -> dict[str, Any]:
    rng = random.Random(seed)
    rounds = warmup + samples
    with tempfile.TemporaryDirectory(prefix="matebot-bench-") as tmp:
        config = make_config(Path(tmp))
        llm = ScriptedLLM()
        async with open_runtime(config, llm=llm, with_memory_worker=True) as rt:
            tune_garbage_collector()  # as the daemon does once started
            repos = rt.core.repos
            count = rt.tokens.count_text
            setup = time.perf_counter()
            fresh: dict[int, list[str]] = {}
            long_chats: dict[int, str] = {}
            for length in lengths:
                if length <= window:  # a short conversation: a fresh pre-seeded chat per call
                    fresh[length] = []
                    for i in range(rounds):
                        chat = f"len{length}-{i}"
                        await seed_conversation(repos, f"web:{chat}", rows=chat_rows(length, rng, count))
                        fresh[length].append(chat)
                else:
                    chat = f"len{length}"
                    await seed_conversation(repos, f"web:{chat}", rows=chat_rows(length, rng, count))
                    long_chats[length] = chat
            setup_s = time.perf_counter() - setup

            timings: dict[int, list[float]] = {length: [] for length in lengths}
            reply_timings: dict[int, list[float]] = {length: [] for length in lengths}
            profiler = cProfile.Profile() if profile is not None else None
            order = list(lengths)
            for i in range(rounds):
                rng.shuffle(order)
                for length in order:
                    if length in long_chats:
                        await keep_window(repos, f"web:{long_chats[length]}", window, rt.window)
                        chat = long_chats[length]
                    else:
                        chat = fresh[length][i]
                    message = _message(chat, rng)
                    profiling = profiler is not None and length == profile and i >= warmup
                    if profiling:
                        profiler.enable()  # type: ignore[union-attr]
                    start = time.perf_counter()
                    reply = await rt.router.handle(message)
                    replied = time.perf_counter() - start
                    await drained(rt)
                    elapsed = time.perf_counter() - start
                    if profiling:
                        profiler.disable()  # type: ignore[union-attr]
                    assert reply is not None and reply.text, "the router gave no reply"
                    if i >= warmup:
                        timings[length].append(elapsed)
                        reply_timings[length].append(replied)
            pending = len(await repos.memory_pending.all())
            # What the window held on the last call of each length (history after the cut-off).
            window_sizes = {}
            for length in lengths:
                chat = long_chats.get(length) or fresh[length][-1]
                conversation = await repos.conversations.get(f"web:{chat}")
                assert conversation is not None
                window_sizes[str(length)] = await repos.messages.count(
                    conversation.id, after_id=conversation.summary_upto_message_id) - 2
            # The same long chats at a real compaction cadence: the cut-off moves once the
            # window has grown by 20 messages, so most turns find their window in memory.
            warm: dict[int, list[float]] = {length: [] for length in long_chats}
            for i in range(samples):
                for length, chat in long_chats.items():
                    if i % 10 == 0:
                        await keep_window(repos, f"web:{chat}", window, rt.window)
                    start = time.perf_counter()
                    reply = await rt.router.handle(_message(chat, rng))
                    await drained(rt)
                    warm[length].append(time.perf_counter() - start)
                    assert reply is not None and reply.text, "the router gave no reply"
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(45)
        print(f"-- cProfile of {samples} handle() calls at length {profile} --\n{out.getvalue()}", file=sys.stderr)
    p50 = {str(k): ms(percentile(v, 50)) for k, v in timings.items()}
    p99 = {str(k): ms(percentile(v, 99)) for k, v in timings.items()}
    first, last = str(min(lengths)), str(max(lengths))
    return {
        "bench": "pipeline",
        "p50_ms": p50,
        "p99_ms": p99,
        "mean_ms": {str(k): ms(statistics.fmean(v)) for k, v in timings.items()},
        "reply_p50_ms": {str(k): ms(percentile(v, 50)) for k, v in reply_timings.items()},
        "warm_p50_ms": {str(k): ms(percentile(v, 50)) for k, v in warm.items()},
        "warm_p99_ms": {str(k): ms(percentile(v, 99)) for k, v in warm.items()},
        "paths": "p50_ms/p99_ms: every call reads its window from SQLite (cut-off moved before each call); "
                 "warm_*: cut-off moved every 10 calls, the window cache serves the rest",
        "samples": samples,
        "warmup": warmup,
        "p50_ratio_longest_to_shortest": round(p50[last] / p50[first], 3) if p50[first] else None,
        "window_messages_before_call": window_sizes,
        "llm": "in-process ScriptedLLM, 0 ms latency",
        "memory_sink": "MemoryWorker built; publish writes mate_memory_pending; consumer loop not running",
        "pending_rows_recorded": pending,
        "db": "SQLite WAL file in a temp dir",
        "setup_s": round(setup_s, 2),
        "target": "p50 <= 2 ms; p50(10000) <= 1.2 x p50(10)",
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="bench.pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--window", type=int, default=40)
    parser.add_argument("--profile", type=int, default=None, metavar="LENGTH",
                        help="cProfile the timed calls of this length; the report goes to stderr")
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    return emit(asyncio.run(run_pipeline(samples=args.samples, warmup=args.warmup, lengths=args.lengths,
                                         window=args.window, profile=args.profile)), load)


if __name__ == "__main__":
    main()
