"""Shared bench helpers: config, a scripted in-process LLM, realistic seed messages, stats, output."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bot.core.config import Config, parse_config
from bot.conversation.window import ConversationWindowManager
from bot.llm import LLMRequest, LLMResponse
from bot.storage import Repositories

_WORDS = (
    "the meeting tomorrow project deadline coffee weekend plan garden report budget travel "
    "Berlin train ticket dinner friend birthday python code review bug database backup server "
    "movie book chapter recipe pasta tomato music guitar lesson doctor appointment morning "
    "evening call family holiday summer winter flight hotel museum walk park dog cat email "
    "invoice client design draft notes idea question answer because maybe really should would "
    "could think remember prefer usually always never sometimes quickly slowly later today"
).split()


def make_config(tmp_path: Path, **mate: object) -> Config:
    """A Config whose database lives in tmp_path; `mate` overrides keys (kebab-case dicts)."""
    data: dict[str, object] = {"database": {"path": str(tmp_path / "mate.db")}, "timezone": "UTC",
                               "llm": {"provider": "offline"}}
    data.update(mate)
    return parse_config({"mate": data}, environ={})


def quiet_logs() -> None:
    """Benches print one JSON line on stdout; logs go to stderr, warnings and above only."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


class HostLoad:
    """How much CPU other processes used while a bench ran (0..1 of all cores): a noise gauge.

    From /proc/stat (all cores, busy jiffies) minus this process's and its waited-for
    children's CPU time; None where /proc/stat is missing.
    """

    def __init__(self) -> None:
        self._start = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        try:
            fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        hz = os.sysconf("SC_CLK_TCK")
        busy = (sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)) / hz  # minus idle, iowait
        own = os.times()
        return time.monotonic(), busy, own.user + own.system + own.children_user + own.children_system

    def other_share(self) -> float | None:
        end = self._sample()
        if self._start is None or end is None:
            return None
        wall = (end[0] - self._start[0]) * (os.cpu_count() or 1)
        other = (end[1] - self._start[1]) - (end[2] - self._start[2])
        return round(min(max(other / wall, 0.0), 1.0), 3) if wall > 0 else None


def emit(result: dict[str, Any], load: HostLoad | None = None) -> dict[str, Any]:
    """Print the bench's one JSON line, with gauges of how quiet the host was."""
    result.setdefault("loadavg_1m", round(os.getloadavg()[0], 2))
    if load is not None:
        result.setdefault("host_other_cpu_share", load.other_share())
    print(json.dumps(result, separators=(", ", ": ")), flush=True)
    return result


def resident_mb(pid: int | str = "self") -> float:
    """A process's resident memory (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmRSS line")


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sample."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


class ScriptedLLM:
    """An in-process LLMClient: fixed latency per purpose, canned replies, no network.

    chat -> a short text reply; summary -> a short summary; memory/emergence -> a JSON
    reply that appends one daily-note line (should_update true, no file replacements).
    """

    def __init__(self, *, chat_latency: float = 0.0, memory_latency: float = 0.0,
                 sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        self.chat_latency = chat_latency
        self.memory_latency = memory_latency
        self._sleep = sleep
        self.calls: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete(self, request: LLMRequest, on_text: Any = None) -> LLMResponse:
        self.calls[request.purpose] = self.calls.get(request.purpose, 0) + 1
        latency = self.chat_latency if request.purpose == "chat" else self.memory_latency
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if latency > 0:
                await self._sleep(latency)
        finally:
            self.in_flight -= 1
        if request.purpose in ("memory", "emergence"):
            text = json.dumps({"should_update": True, "reason": "a plan worth keeping",
                               "daily_entry": "- talked about the weekend plan", "memory_update": "",
                               "profile_update": ""})
        elif request.purpose == "summary":
            text = "Earlier the user and the assistant planned a trip and reviewed some code."
        else:
            text = "Sure — that sounds like a good plan. Anything else I can help with?"
        return LLMResponse(text=text, content=[{"type": "text", "text": text}], stop_reason="end_turn",
                           input_tokens=0, output_tokens=12, model=request.model)


def sentence(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def chat_rows(count: int, rng: random.Random, count_tokens: Callable[[str], int],
              *, min_words: int = 15, max_words: int = 45) -> list[tuple[str, str, int]]:
    """Alternating user/assistant rows (user first), ~20-60 tokens each."""
    rows = []
    for i in range(count):
        text = sentence(rng, rng.randint(min_words, max_words))
        rows.append(("user" if i % 2 == 0 else "assistant", text, count_tokens(text)))
    return rows


async def seed_conversation(
    repos: Repositories, conversation_id: str, *, rows: list[tuple[str, str, int]], agent_id: int = 1,
    channel: str = "web", batch: int = 2000,
) -> list[int]:
    """Create a conversation whose chat key is its id and store `rows` via add_many; the ids."""
    await repos.conversations.create(conversation_id, agent_id=agent_id, channel=channel,
                                     chat_key=conversation_id, trigger_source=channel)
    ids: list[int] = []
    for start in range(0, len(rows), batch):
        ids += await repos.messages.add_many(conversation_id, rows[start:start + batch])
    return ids


SUMMARY = ("The user is planning a trip to Berlin in the summer, prefers trains to flights, "
           "and asked for help reviewing the budget spreadsheet and a Python backup script.")


async def keep_window(repos: Repositories, conversation_id: str, window: int,
                      manager: ConversationWindowManager | None = None, *, cold: bool = False) -> None:
    """Set the compaction cut-off so exactly `window` stored messages follow it (untimed set-up).

    Stands in for the compaction a long conversation has had, and keeps a bench's own turns
    from growing the window it measures. The window manager is told as a compaction tells it
    (it keeps the rest of the window it caches), or with `cold` forgets the conversation, as
    after a restart: the next turn reads its window back from the database.
    """
    page = await repos.messages.latest(conversation_id, window + 1)
    if len(page) > window:
        await repos.conversations.set_summary(conversation_id, SUMMARY, page[0].id)
        if manager is None:
            return
        if cold:
            manager.forget(conversation_id)
        else:
            manager.folded(conversation_id, SUMMARY, page[0].id)
