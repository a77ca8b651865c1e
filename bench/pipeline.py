"""Per-message pipeline overhead (router -> window -> store -> event) versus conversation length.

What: the round trip of `ChannelMessageRouter.handle()` for one web message and the
recording of its memory event (written just after the reply, so `router.drain()` is
awaited inside the timing; `reply_p50_ms` is the time to the reply alone), with the
LLM time taken out: the LLM is an in-process scripted client answering in 0 ms, the
database is a real SQLite file (WAL) in a temp dir, and the memory worker is built, so
`publish` runs its pre-checks and writes the `mate_memory_pending` row, but its consumer
loop is not running (no extraction competes with the measurement).

How: conversations of 10, 1,000 and 10,000 stored messages (alternating user/assistant,
~20-60 tokens each, inserted with `add_many`). The window is what a user gets from the
default config (`WindowConfig`: 128,000 input tokens, compaction at 0.75 of that, or once the
conversation — summary, history, new message — passes the 24,000-token working window, which
comes first): each long conversation is measured at the largest window that lets it reach
without compacting, as the window manager counts tokens: for 1,000 and 10,000 messages the
newest few hundred behind a compaction summary, beside the system prompt, tools and the
current message. Before each timed call the cut-off is moved (untimed) so the window stays at
that size instead of growing with the bench's own turns (so a summary sits ahead of the
1,000 too), and the window manager is told as a compaction tells it: it keeps the rest of the
window it holds in memory, so each call is a turn of a long chat as the daemon runs it.
`compactions_while_timing` counts any compaction that ran anyway (0 expected). `--window N`
caps the window at N messages instead. Lengths up to 100 use a fresh pre-seeded chat for
every call (no summary: read from the database each time). After `--warmup` calls per
length, `--samples` timed calls per length are made, interleaved across lengths.

Then the long chats again with the window forgotten before each call, so every turn reads it
back from SQLite, as the first turn after a restart does: `cold_p50_ms` / `cold_p99_ms`.

Targets: p50 <= 2 ms (SPEC S18), and p50(10000) <= 1.5 x p50(10) (S32: the working window
bounds the request).

With `--api anthropic|openai|both` the LLM is instead the daemon's real client against the
fake server of that protocol in another process, and the figure is the daemon's CPU per
message (bench/pipeline_api.py; default lengths 10 and 200; target openai / anthropic <= 1.3).

Run: `python -m bench.pipeline [--samples 200] [--profile 10000] [--api both]`; one JSON line on stdout.
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
    SUMMARY, HostLoad, ScriptedLLM, chat_rows, emit, keep_window, make_config, ms, percentile, quiet_logs,
    seed_conversation,
)
from bench.pipeline_api import APIS as API_NAMES, LENGTHS as API_LENGTHS, run as run_protocols, web_message
from bot.llm.tokens import PER_MESSAGE_OVERHEAD
from bot.app.runtime import Runtime, tune_garbage_collector, open_runtime

LENGTHS = (10, 1000, 10000)
FRESH_UP_TO = 100  # lengths up to this get a fresh pre-seeded chat per call
MARGIN_TOKENS = 200  # headroom below the trigger: the current message's time label, the clock


async def drained(rt: Runtime) -> None:
    """The memory event is written just after the reply, off its path: wait for it too."""
    if not await rt.router.drain(5):
        raise RuntimeError("the memory event was not recorded within 5 s")


async def _request_tokens(rt: Runtime, conversation_id: str) -> int:
    """The window manager's own estimate of the next request, less its current message."""
    conversation = await rt.core.repos.conversations.get(conversation_id)
    assert conversation is not None
    system = await rt.agent.system_prompt(conversation.agent_id, "Mate")
    return await rt.window.usage(conversation, system, rt.agent.tool_definitions(), rt.agent.model)


async def _hold_largest(rt: Runtime, conversation_id: str, room: int, most: int | None) -> int:
    """Move the cut-off forward until the window is the largest (at most `most` messages)
    whose request, as the window manager counts it, stays within `room`; its message count.

    The cut-off never moves back, so a first guess from stored token counts (no more than
    the manager counts) is shrunk by whatever the manager's count still exceeds.
    """
    repos = rt.core.repos
    page = await repos.messages.latest(conversation_id, 1 << 30)  # oldest first
    keep = min(len(page), most or len(page))
    if keep == len(page) and await _request_tokens(rt, conversation_id) <= room:
        return keep  # the whole conversation fits: no summary, as a user would have it
    system = await rt.agent.system_prompt(1, "Mate")
    used = (rt.tokens.count_text(system) + rt.tokens.count_tools(rt.agent.tool_definitions())
            + rt.tokens.count_message(rt.window.summary_message(SUMMARY)))
    for count, record in enumerate(reversed(page[len(page) - keep:])):
        used += record.token_count + PER_MESSAGE_OVERHEAD
        if used > room:
            keep = count
            break
    while keep < len(page):
        await repos.conversations.set_summary(conversation_id, SUMMARY, page[-keep - 1].id)
        rt.window.forget(conversation_id)
        over = await _request_tokens(rt, conversation_id) - room
        if over <= 0 or keep == 0:
            break
        shed = 0
        for record in page[len(page) - keep:]:
            shed += record.token_count + PER_MESSAGE_OVERHEAD
            keep -= 1
            if shed >= over:
                break
    return keep


async def _held(rt: Runtime, conversation_id: str) -> int:
    """Messages after the cut-off, less the last call's user message and reply."""
    conversation = await rt.core.repos.conversations.get(conversation_id)
    assert conversation is not None
    return await rt.core.repos.messages.count(conversation_id, after_id=conversation.summary_upto_message_id) - 2


async def run_pipeline(
    *, samples: int = 200, warmup: int = 20, lengths: Sequence[int] = LENGTHS, window: int | None = None,
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
                if length <= min(window or FRESH_UP_TO, FRESH_UP_TO):  # short: a fresh pre-seeded chat per call
                    fresh[length] = []
                    for i in range(rounds):
                        chat = f"len{length}-{i}"
                        await seed_conversation(repos, f"web:{chat}", rows=chat_rows(length, rng, count))
                        fresh[length].append(chat)
                else:
                    chat = f"len{length}"
                    await seed_conversation(repos, f"web:{chat}", rows=chat_rows(length, rng, count))
                    long_chats[length] = chat
            # The window each long chat is held at: the default budget's (just under the
            # compaction trigger), or the --window cap.
            # The conversation part (summary, history, new message) also stays within the
            # working window, which is what bounds the request by default.
            budget, trigger, working = rt.window.budget, rt.window.trigger, rt.window.working_tokens
            current = max(rt.tokens.count_message(web_message("x", rng).text) for _ in range(20))
            fixed = (rt.tokens.count_text(await rt.agent.system_prompt(1, "Mate"))
                     + rt.tokens.count_tools(rt.agent.tool_definitions()))
            room = min(trigger, fixed + working) - current - MARGIN_TOKENS
            targets: dict[int, int] = {}
            first_tokens: dict[str, int] = {}
            for length, chat in long_chats.items():
                targets[length] = await _hold_largest(rt, f"web:{chat}", room, window)
                first_tokens[str(length)] = await _request_tokens(rt, f"web:{chat}")
            setup_s = time.perf_counter() - setup
            summaries_before = rt.window.summary_calls

            timings: dict[int, list[float]] = {length: [] for length in lengths}
            reply_timings: dict[int, list[float]] = {length: [] for length in lengths}
            profiler = cProfile.Profile() if profile is not None else None
            order = list(lengths)
            for i in range(rounds):
                rng.shuffle(order)
                for length in order:
                    if length in long_chats:
                        await keep_window(repos, f"web:{long_chats[length]}", targets[length], rt.window)
                        chat = long_chats[length]
                    else:
                        chat = fresh[length][i]
                    message = web_message(chat, rng)
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
            window_sizes: dict[str, int] = {}
            for length in lengths:
                chat = long_chats.get(length) or fresh[length][-1]
                window_sizes[str(length)] = await _held(rt, f"web:{chat}")
            # The same long chats with the window forgotten before each call: read back from
            # SQLite every time, as after a restart.
            cold: dict[int, list[float]] = {length: [] for length in long_chats}
            for _ in range(samples):
                for length, chat in long_chats.items():
                    await keep_window(repos, f"web:{chat}", targets[length], rt.window, cold=True)
                    start = time.perf_counter()
                    reply = await rt.router.handle(web_message(chat, rng))
                    await drained(rt)
                    cold[length].append(time.perf_counter() - start)
                    assert reply is not None and reply.text, "the router gave no reply"
            compactions = rt.window.summary_calls - summaries_before
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
        "cold_p50_ms": {str(k): ms(percentile(v, 50)) for k, v in cold.items()},
        "cold_p99_ms": {str(k): ms(percentile(v, 99)) for k, v in cold.items()},
        "paths": "p50_ms/p99_ms: cut-off moved before each call as a compaction moves it (the window kept "
                 "in memory is trimmed; short chats are read from SQLite); cold_*: the long chats' window "
                 "forgotten before each call and read back from SQLite, as after a restart",
        "samples": samples,
        "warmup": warmup,
        "p50_ratio_longest_to_shortest": round(p50[last] / p50[first], 3) if p50[first] else None,
        "window_messages_before_call": window_sizes,
        "window_request_tokens_first_call": first_tokens,
        "window_budget": {"max_input_tokens": budget, "compact_trigger_tokens": trigger,
                          "working_tokens": working,
                          "cap_messages": window,
                          "source": "default config (WindowConfig)" if window is None else "--window cap"},
        "compactions_while_timing": compactions,
        "llm": "in-process ScriptedLLM, 0 ms latency",
        "memory_sink": "MemoryWorker built; publish writes mate_memory_pending; consumer loop not running",
        "pending_rows_recorded": pending,
        "db": "SQLite WAL file in a temp dir",
        "setup_s": round(setup_s, 2),
        "target": "p50 <= 2 ms; p50(10000) <= 1.5 x p50(10)",
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="bench.pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help=f"stored messages per conversation (default {LENGTHS}; with --api {API_LENGTHS})")
    parser.add_argument("--window", type=int, default=None, metavar="MESSAGES",
                        help="cap the window at this many messages (default: the default config's token budget)")
    parser.add_argument("--profile", type=int, default=None, metavar="LENGTH",
                        help="cProfile the timed calls of this length; the report goes to stderr")
    parser.add_argument("--api", choices=("scripted", "anthropic", "openai", "both"), default="scripted",
                        help="scripted: the in-process LLM (default); otherwise the daemon's real client against "
                             "the fake server of that protocol, reporting CPU per message")
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    if args.api != "scripted":
        apis = API_NAMES if args.api == "both" else (args.api,)
        return emit(run_protocols(apis, args.lengths, args.samples, args.warmup), load)
    return emit(asyncio.run(run_pipeline(samples=args.samples, warmup=args.warmup, lengths=args.lengths or LENGTHS,
                                         window=args.window, profile=args.profile)), load)


if __name__ == "__main__":
    main()
