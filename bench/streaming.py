"""Time to the first visible text of a reply on Telegram, with and without streaming.

What: a direct message pushed into the fake Telegram Bot API server, answered through
the real pipeline (python-telegram-bot polling, router, agent, the Anthropic SDK) by the
fake Messages API paced like a real model: `--ttft` (0.5 s) to the first token, then
`--rate` (50) tokens a second, a `--tokens` (400) token answer. first_text_s is the time
from the message's arrival on the fake server to the first text the user can see there
(a sendMessageDraft or sendMessage); the same is measured with `stream: false`.

Target (SPEC): first_text_s <= ttft_s + 1.2 with streaming (without it, ttft + 8 s).
Not included: the network between you and Telegram or the model provider (both fakes
are on 127.0.0.1), and Telegram's own long-poll delay (the fake hands updates out as
soon as they are pushed; the adapter's poll is already waiting).

Both protocols are measured: the Anthropic Messages API (the top-level figures) and
OpenAI-compatible Chat Completions (under "openai"), each against its fake paced the same way.

Run: `python -m bench.streaming`; one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/streaming.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import HostLoad, emit, make_config, quiet_logs
from bot.app.runtime import open_runtime
from channels.telegram.adapter import TelegramChannel

OWNER = 42


def _answer(tokens: int) -> str:
    # 4 characters a token, as the fake (and roughly the real tokenizer) counts English text
    return " ".join(f"wd{i % 10}" for i in range(tokens))


async def _once(ttft: float, rate: float, tokens: int, stream: bool, api: str = "anthropic") -> dict[str, float]:
    from tests.support.fakes.anthropic import FakeAnthropic
    from tests.support.fakes.openai_chat import FakeOpenAIChat
    from tests.support.fakes.telegram import FakeTelegram

    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
    with tempfile.TemporaryDirectory(prefix="matebot-stream-") as tmp:
        fake = FakeOpenAIChat if api == "openai" else FakeAnthropic
        async with fake(ttft=ttft, tokens_per_s=rate) as llm, FakeTelegram() as tg:
            base_url = llm.base_url if isinstance(llm, FakeOpenAIChat) else llm.url
            config = make_config(
                Path(tmp),
                llm={"provider": "anthropic", "api": api, "api-key": "sk-bench", "base-url": base_url, "max-retries": 0,
                     "max-output-tokens": tokens * 2, "stream": stream},
                channels={"telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url,
                                       "admins": [str(OWNER)]}},
            )
            async with open_runtime(config, with_memory_worker=False) as rt:
                channel = TelegramChannel(config.mate.channels.telegram, rt.router.handle, rt.core.prompts,
                                          poll_timeout=0.2, busy_poll_interval=0.01)
                task = asyncio.create_task(channel.run())
                try:
                    await tg.wait_for_call("getUpdates")
                    llm.reply_text(_answer(tokens))
                    start = time.monotonic()
                    tg.push_text("tell me everything", chat_id=OWNER, user_id=OWNER)
                    first = await tg.wait_for_visible(timeout=ttft + tokens / rate + 10)
                    await tg.wait_for_sent(timeout=ttft + tokens / rate + 10)
                    done = time.monotonic()
                finally:
                    await channel.stop()
                    await task
    return {"first": first[0] - start, "done": done - start}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ttft", type=float, default=0.5)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    result = {
        "bench": "streaming",
        "ttft_s": args.ttft,
        "tokens_per_s": args.rate,
        "answer_tokens": args.tokens,
        **_measured("anthropic", args),
        "openai": _measured("openai", args),
        "target": "first_text_s <= ttft_s + 1.2",
    }
    return emit(result, load)


def _measured(api: str, args: argparse.Namespace) -> dict[str, Any]:
    streamed = [asyncio.run(_once(args.ttft, args.rate, args.tokens, True, api)) for _ in range(args.runs)]
    whole = asyncio.run(_once(args.ttft, args.rate, args.tokens, False, api))
    return {
        "first_text_s": round(statistics.median(r["first"] for r in streamed), 3),
        "first_text_runs_s": [round(r["first"], 3) for r in streamed],
        "reply_done_s": round(statistics.median(r["done"] for r in streamed), 3),
        "first_text_without_streaming_s": round(whole["first"], 3),
    }


if __name__ == "__main__":
    main()
