"""Time to the first visible text in an active chat: what storing the user's message first costs.

What: direct messages pushed into the fake Telegram Bot API server one after another in
the same chat, answered through the real pipeline (python-telegram-bot polling, router,
agent, SQLite in WAL mode, the Anthropic SDK) by the fake Messages API paced like a real
model: `--ttfts` (0.5 and 2 s) to the first token, then `--rate` (50) tokens a second,
a `--tokens` (20) token answer, streamed. The chat is active: one exchange is made
before the timed ones, so the agent finds the conversation's window in its cache (the
path where the user message's insert could overlap the model call; a cold chat must
read its history after the insert either way).

Per message: `first_text_s`, from the message's arrival on the fake Telegram server to
the first text the user can see there (a sendMessageDraft or sendMessage), and
`model_request_ms`, from the same arrival to the model request's arrival on the fake
Messages API (everything our pipeline does before the model starts, the insert
included). Medians over `--messages` timed messages per time to first token.

Measured when the agent stopped overlapping the insert with the model call (2 cores
shared with other work; 3 runs x 10 messages, medians of the 30): first_text_s 0.532 s
(ttft 0.5 s) and 2.032 s (ttft 2 s) with the insert overlapping the model call, 0.538 s
and 2.032 s with the insert committed first; the insert itself takes ~0.4 ms, the most
the overlap could save (0.1 % at 0.5 s), far below the 10 % that would pay for it.

Run: `python -m bench.user_insert [--messages 10]`; one JSON line on stdout.
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

if __package__ in (None, ""):  # `python bench/user_insert.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import HostLoad, emit, make_config, quiet_logs
from bot.app.runtime import open_runtime
from channels.telegram.adapter import TelegramChannel

OWNER = 42


def _answer(tokens: int) -> str:
    # 4 characters a token, as the fake (and roughly the real tokenizer) counts English text
    return " ".join(f"wd{i % 10}" for i in range(tokens))


async def _chat(ttft: float, rate: float, tokens: int, messages: int) -> list[dict[str, float]]:
    from tests.support.fakes.anthropic import FakeAnthropic
    from tests.support.fakes.telegram import FakeTelegram

    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
    bound = ttft + tokens / rate + 10
    timings: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="matebot-insert-") as tmp:
        async with FakeAnthropic(ttft=ttft, tokens_per_s=rate) as llm, FakeTelegram() as tg:
            config = make_config(
                Path(tmp),
                llm={"provider": "anthropic", "api-key": "sk-bench", "base-url": llm.url, "max-retries": 0,
                     "max-output-tokens": tokens * 2, "stream": True},
                channels={"telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url,
                                       "admins": [str(OWNER)]}},
            )
            async with open_runtime(config, with_memory_worker=False) as rt:
                channel = TelegramChannel(config.mate.channels.telegram, rt.router.handle, rt.core.prompts,
                                          poll_timeout=0.2, busy_poll_interval=0.01)
                task = asyncio.create_task(channel.run())
                try:
                    await tg.wait_for_call("getUpdates")
                    for turn in range(messages + 1):  # the first exchange makes the chat active
                        llm.reply_text(_answer(tokens))
                        asked = len(llm.messages_requests())
                        start = time.monotonic()
                        tg.push_text(f"tell me more, part {turn}", chat_id=OWNER, user_id=OWNER)
                        first = await tg.wait_for_visible(lambda entry: entry[0] >= start, timeout=bound)
                        await tg.wait_for_sent(turn + 1, timeout=bound)
                        request = [r for r in llm.requests if r.path == "/v1/messages"][asked]
                        if turn:
                            timings.append({"first": first[0] - start, "model_request": request.time - start})
                finally:
                    await channel.stop()
                    await task
    return timings


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ttfts", type=float, nargs="+", default=[0.5, 2.0])
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--messages", type=int, default=10)
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    runs = {ttft: asyncio.run(_chat(ttft, args.rate, args.tokens, args.messages)) for ttft in args.ttfts}
    result = {
        "bench": "user_insert",
        "ttft_s": args.ttfts,
        "tokens_per_s": args.rate,
        "answer_tokens": args.tokens,
        "messages": args.messages,
        "first_text_s": {str(t): round(statistics.median(r["first"] for r in runs[t]), 4) for t in args.ttfts},
        "model_request_ms": {str(t): round(statistics.median(r["model_request"] for r in runs[t]) * 1000, 2)
                             for t in args.ttfts},
        "first_text_runs_s": {str(t): [round(r["first"], 4) for r in runs[t]] for t in args.ttfts},
        "chat": "one active chat (its window cached), streamed answers",
    }
    return emit(result, load)


if __name__ == "__main__":
    main()
