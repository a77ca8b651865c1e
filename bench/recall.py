"""Recall: facts told months ago, asked back in other words, among 100 000 stored messages.

What: 90 days of conversations between one user and agent 1 (`--messages`, 100 000 in
all: everyday chatter in English and Chinese, about half each), with the facts of
bench/recall_corpus.py (25 English, 20 Chinese) planted on random days, each beside two
distractor messages that share its key words; a daily note per day in the workspace.
Agent 2 (a busy group: a fifth as many messages, its own notes) holds a copy of every
fact, which agent 1 must never see. The questions share with their facts the key word a
person would naturally use again (a name, "passport"), rarely more: keyword search
cannot find a fact that shares no word with its question, and the bench does not hide that.
Rows are written in one transaction by the storage layer's bulk loader
(bot/storage/bulk_load.py), so the index triggers build the index as they do in use, and
the loader merges it into one segment per table, as the nightly consolidation leaves it. Then
every fact's question goes through the search the `search_memory` tool uses
(MemorySearchService, default limit 5).

Reported: recall_at_5 (share of questions whose fact message is among the 5 results;
also per language), p95_ms / p50_ms of one search (each question asked 3 times, through
aiosqlite as in the daemon), leaked (results from agent 2: must be 0), the database size
and how long the index took to build. Targets (SPEC): recall_at_5 >= 0.95 at 100 000 messages, p95_ms <= 20.
Not included: the model choosing to search, or its answer from the results.

Run: `python -m bench.recall [--messages 100000] [--keep DIR]`; one JSON line on stdout.
`--keep DIR` builds the database in DIR and keeps it (with planted.json); a later run with
the same DIR, messages and seed asks its questions of that database without building again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/recall.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import HostLoad, emit, make_config, ms, percentile, quiet_logs
from bench.recall_corpus import FACTS, chatter
from bot.app.core import open_core
from bot.storage.bulk_load import NewConversation, NewMessage, NewWorkspaceFile, SqliteBulkLoader
from memory.recall.search import MemorySearchService

DAYS = 90
REPEATS = 3


def _stamp(start: datetime, day: int, minute: int) -> str:
    return (start + timedelta(days=day, minutes=minute)).strftime("%Y-%m-%d %H:%M:%S")


def _message(conversation: str, role: str, content: str, stamp: str) -> NewMessage:
    return NewMessage(conversation, role, content, stamp, token_count=10)


def _build(path: str, messages: int, seed: int) -> tuple[dict[int, int], float]:
    """Writes the corpus; returns {fact index: message id} and the seconds it took."""
    rng = random.Random(seed)
    start = datetime(2026, 8, 1, 8, 0, tzinfo=timezone.utc)
    per_day = messages // DAYS
    planted_on = {index: rng.randrange(DAYS) for index in range(len(FACTS))}
    planted: dict[int, int] = {}
    began = time.perf_counter()
    with SqliteBulkLoader(path) as load:
        # First, so a message on any day finds its conversation's agent.
        load.conversations([NewConversation(f"{chat}:{day}" if day else chat, agent_id, "console", chat,
                                            _stamp(start, day, 0))
                            for agent_id, chat in ((1, "console:me"), (2, "tg:-100")) for day in range(DAYS)])
        for agent_id, chat in ((1, "console:me"), (2, "tg:-100")):
            rows: list[NewMessage] = []
            planted_at: dict[int, int] = {}  # fact index -> its place in rows
            for day in range(DAYS):
                conversation = f"{chat}:{day}" if day else chat
                todays = [i for i, d in planted_on.items() if d == day]
                # The other agent (a busy group) has a fifth as much: its hits must never crowd ours out.
                count = per_day if agent_id == 1 else per_day // 5 + len(todays) * 2
                slots = sorted(rng.sample(range(max(count // 2, 1)), min(len(todays), max(count // 2, 1))))
                minute = 0
                for pair in range(count // 2):
                    minute += 1
                    if slots and pair == slots[0]:
                        slots.pop(0)
                        fact = FACTS[todays.pop()]
                        index = FACTS.index(fact)
                        if agent_id == 1:
                            planted_at[index] = len(rows)
                        rows.append(_message(conversation, "user", fact.statement, _stamp(start, day, minute)))
                        if agent_id == 1:
                            for distractor in fact.distractors:
                                place = rng.randrange(DAYS)
                                rows.append(_message(f"{chat}:{place}" if place else chat, "user", distractor,
                                                     _stamp(start, place, 700 + minute)))
                        noted = "Noted." if fact.language == "en" else "记住了。"
                        rows.append(_message(conversation, "assistant", noted, _stamp(start, day, minute)))
                        continue
                    said, answer = chatter(rng, "zh" if rng.random() < 0.45 else "en")
                    rows.append(_message(conversation, "user", said, _stamp(start, day, minute)))
                    rows.append(_message(conversation, "assistant", answer, _stamp(start, day, minute)))
            ids = load.messages(rows)
            planted.update({index: ids[at] for index, at in planted_at.items()})
            notes: list[NewWorkspaceFile] = []
            for day in range(DAYS):
                note = "\n".join(f"- {chatter(rng, 'en')[0]}" for _ in range(6))
                if agent_id == 2 and day == 0:  # the group's notes hold every fact: none may reach agent 1
                    note += "\n" + "\n".join(f"- {fact.statement}" for fact in FACTS)
                notes.append(NewWorkspaceFile(
                    agent_id, f"memory/{(start + timedelta(days=day)):%Y-%m-%d}{'-group' * (agent_id == 2)}.md",
                    note, _stamp(start, day, 1400)))
            load.workspace_files(notes)
    return planted, time.perf_counter() - began


async def _ask(path: Path, planted: dict[int, int]) -> dict[str, Any]:
    config = make_config(path.parent)
    found = {"en": [0, 0], "zh": [0, 0]}
    latencies: list[float] = []
    leaked = 0
    async with open_core(config) as core:
        stored = await core.repos.messages.count_all()
        service = MemorySearchService(core.repos.search)
        for index, fact in enumerate(FACTS):
            for _ in range(REPEATS):
                began = time.perf_counter()
                result = await service.search(1, fact.question)
                latencies.append(time.perf_counter() - began)
            ids = [r.get("messageId") for r in result["results"]]
            leaked += sum(1 for r in result["results"] if str(r.get("conversationId") or "").startswith("tg:")
                          or str(r.get("filename") or "").endswith("-group.md"))
            found[fact.language][0] += planted.get(index) in ids
            found[fact.language][1] += 1
    hits = sum(f[0] for f in found.values())
    return {
        "messages": stored,
        "recall_at_5": round(hits / len(FACTS), 3),
        "recall_at_5_en": round(found["en"][0] / found["en"][1], 3),
        "recall_at_5_zh": round(found["zh"][0] / found["zh"][1], 3),
        "p50_ms": ms(percentile(latencies, 50)),
        "p95_ms": ms(percentile(latencies, 95)),
        "questions": len(FACTS),
        "leaked": leaked,
    }


async def _schema(path: Path) -> None:
    async with open_core(make_config(path.parent)) as core:
        await core.agents.ensure_configured()
        await core.repos.agents.ensure(2, "Group")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="build the database in DIR and keep it; reuse it when DIR already holds one")
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    if args.keep is None:
        with tempfile.TemporaryDirectory(prefix="matebot-recall-") as folder:
            return emit(_run(Path(folder), args.messages, args.seed), load)
    args.keep.mkdir(parents=True, exist_ok=True)
    return emit(_run(args.keep, args.messages, args.seed), load)


def _run(folder: Path, messages: int, seed: int) -> dict[str, Any]:
    path = folder / "mate.db"
    saved = folder / "planted.json"
    built = json.loads(saved.read_text()) if saved.exists() and path.exists() else None
    if built is not None and built["messages"] == messages and built["seed"] == seed:
        planted, build_s = {int(k): v for k, v in built["planted"].items()}, built["build_s"]
    else:
        path.unlink(missing_ok=True)
        asyncio.run(_schema(path))
        planted, build_s = _build(str(path), messages, seed)
        saved.write_text(json.dumps({"messages": messages, "seed": seed, "planted": planted, "build_s": build_s}))
    return {"bench": "recall", **asyncio.run(_ask(path, planted)), "index_build_s": round(build_s, 1),
            "db_mb": round(path.stat().st_size / 1e6, 1), "target": "recall_at_5 >= 0.95, p95_ms <= 20"}


if __name__ == "__main__":
    main()
