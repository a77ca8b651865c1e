"""`bench/pipeline --api`: the daemon's CPU per message with the real LLM client, Messages against Chat Completions.

What: the round trip of `ChannelMessageRouter.handle()` for one web message and the recording
of its memory event (as `bench.pipeline` times it), but the LLM is the real client the daemon
builds from its config (`AnthropicClient` for `api: anthropic`, `OpenAIClient` for `api:
openai`, through the SDKs and HTTP) talking to the fake server of tests/support/fakes/ for that
protocol, which runs in a process of its own: `time.process_time()` of this process is the
daemon side's CPU only. Both paths: `plain` (no stream) and `streamed` (a reply stream that
drops the text, as a channel that shows nothing would).

How: for each length, a conversation of that many stored messages (alternating user/assistant,
~20-60 tokens each) behind a compaction summary, the cut-off moved (untimed) before each call so
the window stays at that length as the bench's own turns are added. After `warmup` calls, `samples`
timed calls per (protocol, path, length), interleaved in a shuffled order so drift on the host
falls on both protocols alike. `cpu_per_message_ms` is the mean CPU of a timed call;
`ratio_openai_to_anthropic` divides the Chat Completions figure by the Messages one;
`requests_per_message` is what the fakes answered per call (the context probe's few requests at
start included). No wall-clock figure: it would hold the fakes' own time (their prompt caches
compare each prompt with those before it), which is not the daemon's.

Target (SPEC S34): openai / anthropic <= 1.3 on every path and length.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from bench._common import chat_rows, keep_window, make_config, ms, percentile, seed_conversation
from bot.app.runtime import Runtime, open_runtime, tune_garbage_collector
from channels.base import InboundMessage

APIS = ("anthropic", "openai")
LENGTHS = (10, 200)
PATHS = ("plain", "streamed")
REPLY = "Sure, that sounds like a good plan. Anything else I can help with?"
_REPO = Path(__file__).resolve().parent.parent


class _Unseen:
    """A ReplyStream that shows nothing: the streamed path without a channel's own cost."""

    def text(self, delta: str) -> None:
        pass

    def status(self, line: str) -> None:
        pass


class _FakeProcess:
    """The fake server of one protocol in its own process."""

    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url
        self.answered = 0

    def close(self) -> None:
        try:  # stdin closed is the fake's cue to stop; its last line is how many it answered
            out, _ = self.process.communicate(timeout=10)
            self.answered = int(out.split()[-1]) if out.split() else 0
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()


def _start_fake(api: str) -> _FakeProcess:
    process = subprocess.Popen([sys.executable, "-m", "tests.support.fakes.standalone", api, REPLY], cwd=_REPO, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    if not url.startswith("http://"):
        process.kill()
        raise RuntimeError(f"the fake {api} server did not start (it printed {url!r})")
    return _FakeProcess(process, url)


@asynccontextmanager
async def _daemon(api: str, fake: _FakeProcess, tmp: Path) -> AsyncIterator[Runtime]:
    base_url = f"{fake.url}/v1" if api == "openai" else fake.url
    config = make_config(tmp, llm={"provider": "anthropic", "api": api, "api-key": "sk-bench",
                                   "base-url": base_url, "max-retries": 0})
    async with open_runtime(config, with_memory_worker=True) as rt:
        yield rt


def web_message(chat_id: str, rng: random.Random) -> InboundMessage:
    """The owner's next message in a web chat (the pipeline benches' one shape of message)."""
    words = " ".join(rng.choice(("plan", "coffee", "weekend", "train", "budget", "review")) for _ in range(12))
    return InboundMessage(channel="web", chat_id=chat_id, sender_id="owner", sender_name="Owner",
                          text=f"Could you help me with this: {words}?", is_direct=True, trigger_source="web")


async def run_protocols(
    *, apis: Sequence[str] = APIS, lengths: Sequence[int] = LENGTHS, samples: int = 100, warmup: int = 10,
    seed: int = 7,
) -> dict[str, Any]:
    rng = random.Random(seed)
    fakes = {api: _start_fake(api) for api in apis}
    try:
        with tempfile.TemporaryDirectory(prefix="matebot-bench-api-") as tmp:
            async with AsyncExitStack() as stack:
                daemons = {api: await stack.enter_async_context(_daemon(api, fakes[api], Path(tmp) / api))
                           for api in apis}
                cases = [(api, path, length) for api in apis for path in PATHS for length in lengths]
                for api, path, length in cases:
                    rt = daemons[api]
                    rows = chat_rows(length + 2, rng, rt.tokens.count_text)
                    await seed_conversation(rt.core.repos, f"web:{path}-{length}", rows=rows)
                tune_garbage_collector()  # as the daemon does once started
                cpu: dict[tuple[str, str, int], list[float]] = {case: [] for case in cases}
                order = list(cases)
                for i in range(warmup + samples):
                    rng.shuffle(order)
                    for api, path, length in order:
                        rt = daemons[api]
                        chat = f"{path}-{length}"
                        await keep_window(rt.core.repos, f"web:{chat}", length, rt.window)
                        message = web_message(chat, rng)
                        stream = _Unseen() if path == "streamed" else None
                        cpu_started = time.process_time()
                        reply = await rt.router.handle(message, stream=stream)
                        if not await rt.router.drain(5):
                            raise RuntimeError("the memory event was not recorded within 5 s")
                        cpu_used = time.process_time() - cpu_started
                        if reply is None or reply.text != REPLY:
                            raise RuntimeError(f"{api} {path}: the reply was {reply!r}, not the fake's answer")
                        if i >= warmup:
                            cpu[(api, path, length)].append(cpu_used)
    finally:
        for fake in fakes.values():
            fake.close()
    return _report(apis, lengths, samples, warmup, cpu, {api: fakes[api].answered for api in apis})


def _report(apis: Sequence[str], lengths: Sequence[int], samples: int, warmup: int,
            cpu: dict[tuple[str, str, int], list[float]], answered: dict[str, int]) -> dict[str, Any]:
    def table(values: dict[tuple[str, str, int], list[float]], stat: Any) -> dict[str, Any]:
        return {api: {path: {str(length): ms(stat(values[(api, path, length)])) for length in lengths}
                      for path in PATHS} for api in apis}

    cpu_ms = table(cpu, statistics.fmean)
    result: dict[str, Any] = {
        "bench": "pipeline",
        "api": "both" if len(apis) > 1 else apis[0],
        "cpu_per_message_ms": cpu_ms,
        "cpu_p50_ms": table(cpu, lambda v: percentile(v, 50)),
    }
    if set(APIS) <= set(apis):
        ratios = {path: {str(length): _ratio(cpu_ms["openai"][path][str(length)],
                                             cpu_ms["anthropic"][path][str(length)])
                         for length in lengths} for path in PATHS}
        result["ratio_openai_to_anthropic"] = ratios
        result["ratio_max"] = max(r for by_length in ratios.values() for r in by_length.values())
    calls = (warmup + samples) * len(PATHS) * len(lengths)
    result.update({
        "window_messages": list(lengths),
        "samples": samples,
        "warmup": warmup,
        "requests_per_message": {api: round(answered[api] / calls, 3) for api in apis},
        "llm": "the daemon's own client (AnthropicClient / OpenAIClient, SDK and HTTP) against the fake "
               "server of tests/support/fakes/ in a separate process, answering at once",
        "cpu": "time.process_time() of the daemon process over handle() and the memory event's recording",
        "target": "cpu_per_message_ms openai / anthropic <= 1.3 (SPEC S34)",
    })
    return result


def _ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 3) if denominator else float("inf")


def run(apis: Sequence[str], lengths: Sequence[int] | None, samples: int, warmup: int) -> dict[str, Any]:
    return asyncio.run(run_protocols(apis=apis, lengths=lengths or LENGTHS, samples=samples, warmup=warmup))
