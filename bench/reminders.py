"""How late reminders arrive: from a task's due time to its message reaching the (fake) Telegram server.

What: `--count` (20) one-shot reminders, each in a chat of its own, are scheduled through the task
rules (TaskService.schedule, as the schedule_task tool does) for whole seconds from ~2 s ahead,
`--per-second` (2) due in the same second. The daemon's own pieces run them: the TaskTimer on the
real clock, ReminderDelivery (a `cron` turn through the router and agent, the model on the fake
Messages API answering after `--model-ms`), and the real Telegram adapter (python-telegram-bot)
on the fake Bot API. A reminder's delay is the fake server's receipt time of its sendMessage
minus its due time.

Target: none in the SPEC; the delay should be what the model takes plus tens of milliseconds.

Run: `python -m bench.reminders [--count 20] [--per-second 2] [--model-ms 0]`; one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/reminders.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import HostLoad, emit, make_config, ms, percentile, quiet_logs
from bot.llm import AnthropicClient
from bot.app.runtime import open_runtime
from bot.storage.tasks import ChatRef
from bot.schedule.reminders.delivery import ChannelOutbox, ReminderDelivery
from bot.schedule.reminders.service import Sender
from bot.schedule.timer import TaskTimer
from channels.telegram.adapter import TelegramChannel

FIRST_CHAT = 1000


async def measure(count: int, per_second: int, model_ms: float) -> dict[str, Any]:
    from tests.support.fakes.anthropic import FakeAnthropic
    from tests.support.fakes.telegram import FakeTelegram

    with tempfile.TemporaryDirectory() as folder:
        async with FakeAnthropic(default_text="Time for it!", latency=model_ms / 1000) as llm, \
                FakeTelegram() as tg:
            config = make_config(Path(folder), llm={"api-key": "k", "base-url": llm.url, "max-retries": 0,
                                                    "stream": False},
                                 # Each chat's person may schedule there and reaches agent 1, as the
                                 # timer checks again before each run.
                                 channels={"telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url,
                                                        "dm-policy": "open",
                                                        "admins": [str(FIRST_CHAT + i) for i in range(count)]}})
            async with AnthropicClient(config.mate.llm) as client, open_runtime(config, llm=client) as rt:
                telegram = TelegramChannel(config.mate.channels.telegram, rt.router.handle, rt.core.prompts,
                                           access=rt.access.telegram, poll_timeout=0.2)
                outbox = ChannelOutbox()
                outbox.add(telegram)
                polling = asyncio.create_task(telegram.run(), name="bench-telegram")
                delivery = ReminderDelivery(rt.router, outbox, rt.core.prompts, rt.access, rt.core.repos)
                try:
                    async with TaskTimer(rt.core.repos.tasks, rt.tasks, delivery, catch_up_minutes=120):
                        return await _run(rt.tasks, tg, count, per_second)
                finally:
                    await telegram.stop()
                    await polling


async def _run(tasks: Any, tg: Any, count: int, per_second: int) -> dict[str, Any]:
    wall_minus_monotonic = time.time() - time.monotonic()  # the fake stamps receipts on the monotonic clock
    start = math.ceil(time.time()) + 2
    due: dict[str, float] = {}
    for index in range(count):
        moment = start + index // per_second
        chat = str(FIRST_CHAT + index)
        at = datetime.fromtimestamp(moment, timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds")
        await tasks.schedule(ChatRef("telegram", chat), Sender(chat, "bench"), 1, f"reminder {index}", at=at)
        due[chat] = float(moment)
    deadline = time.monotonic() + (count / per_second) + 30
    while time.monotonic() < deadline:
        if len({str(chat) for _, method, chat, _ in tg.visible if method == "sendMessage"}) >= count:
            break
        await asyncio.sleep(0.05)
    arrived: dict[str, float] = {}
    for stamp, method, chat, _ in tg.visible:
        if method == "sendMessage":
            arrived.setdefault(str(chat), stamp + wall_minus_monotonic)
    delays = [arrived[chat] - due[chat] for chat in due if chat in arrived]
    if not delays:
        raise SystemExit("bench.reminders: no reminder arrived")
    return {"arrived": len(delays), "early": sum(d < 0 for d in delays),
            "p50_ms": ms(percentile(delays, 50)), "p95_ms": ms(percentile(delays, 95)),
            "max_ms": ms(max(delays)), "min_ms": ms(min(delays))}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.reminders", description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--per-second", type=int, default=2)
    parser.add_argument("--model-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    measured = asyncio.run(measure(args.count, args.per_second, args.model_ms))
    return emit({"bench": "reminders", "count": args.count, "per_second": args.per_second,
                 "model_ms": args.model_ms, **measured}, load)


if __name__ == "__main__":
    main()
