"""Recall on real dialogue: LoCoMo's questions asked of its conversations through our search.

What: each conversation of a LoCoMo file (default `../shared/data/locomo-dev.json`,
conversations 1–5; the dataset's own JSON format, so the full set works too) becomes a
Telegram group chat with its own agent, as the daemon stores groups: every turn a user
message `[Speaker] text` with the speaker as sender, at its session's date and time
(turns 30 s apart). Rows go in through the daemon's schema, so the index triggers build
the index as they do in use; each agent's conversation is one chat, so an agent never
sees another's rows. Every question of categories 1–4 (single-hop, temporal,
multi-hop, open-domain; 5, the unanswerable ones, have no evidence) goes through the
search the `search_memory` tool uses (MemorySearchService, its default limit of 5).

Reported (one JSON line):
- recall_at_5: LoCoMo's evidence recall (share of a question's evidence turns among the
  5 results), averaged over questions; also per category;
- hit_at_5: share of questions with any evidence turn among the results;
- shown_at_5: share with an evidence turn shown at all: a result, or in a result's
  context (the two messages either side of it);
- session_recall_at_5: share of a question's evidence sessions that a result comes from;
- p50_ms / p95_ms of one search (through aiosqlite, as in the daemon);
- leaked: results from another agent's rows (must be 0).
Targets: shown_at_5 >= 0.92, recall_at_5 >= 0.65, p95_ms <= 30.
Not included: the model writing its own query, or its answer from the results.

When the builtin embedder is installed (`pip install 'matebot[embeddings]'`), the same
questions are asked again with its vectors fused (as `mate.memory.embeddings: builtin` does
in the daemon), and the line adds `builtin`: the same figures, its p95, the backfill's
seconds and the resident memory it added (`extra_memory_mb`); `--no-builtin` leaves it out.

With `--embeddings BASE_URL [--embeddings-model NAME]` (an OpenAI-compatible embeddings
server, e.g. `python -m tests.support.fakes.embeddings` or scripts/embeddings_server.py), every
message first gets its vector through the daemon's backfill, then the questions go through
the fused search; the line adds `embeddings` (model, vectors, backfill seconds). p50/p95
then include the query's round trip to that server. Its key, if it wants one: $EMBEDDINGS_API_KEY.

The data is for evaluation only (CC BY-NC 4.0) and is never copied into the project; the
bench says so in one line and exits when the file is missing.

Run: `python -m bench.recall_locomo [--data FILE] [--embeddings BASE_URL]`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

if __package__ in (None, ""):  # `python bench/recall_locomo.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import HostLoad, emit, make_config, ms, percentile, quiet_logs, resident_mb
from bot.app.core import Core, open_core
from bot.core.config import EmbeddingsConfig
from bot.storage.bulk_load import (
    NewAgent,
    NewChatAgent,
    NewConversation,
    NewMessage,
    SqliteBulkLoader,
)
from bot.storage.embeddings import EmbeddingRepository
from bot.core.records import MessageRecord
from memory.extraction.facts import linked_facts
from memory.recall.builtin import BuiltinEmbedder, BuiltinUnavailable
from memory.recall.embeddings import (
    EmbeddingBackfill,
    EmbeddingClient,
    EmbeddingFailed,
    EndpointHealth,
    OpenAIEmbeddingClient,
    SemanticSearch,
)
from memory.recall.search import MemorySearchService, SemanticRanking

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"
CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop"}
TURN_SECONDS = 30
LIMIT = 5
_EVIDENCE = re.compile(r"D(\d+):(\d+)")
_SESSION_TIME = "%I:%M %p on %d %B, %Y"


@dataclass(frozen=True, slots=True)
class Question:
    agent_id: int
    text: str
    category: int
    evidence: frozenset[str]  # dia ids, e.g. "D1:3"


@dataclass(slots=True)
class Corpus:
    questions: list[Question] = field(default_factory=list)
    dia_of: dict[int, str] = field(default_factory=dict)  # message id -> dia id
    agent_of: dict[int, int] = field(default_factory=dict)  # message id -> agent id
    asked_on: dict[int, datetime] = field(default_factory=dict)  # agent id -> the day after its last session
    sessions: list[Session] = field(default_factory=list)
    messages: int = 0


@dataclass(slots=True)
class Session:
    """One session's turns as stored, and the facts LoCoMo's observations took from it (each with
    the turn it names as its source: used only to count how often our link agrees)."""

    turns: list[MessageRecord]
    facts: list[tuple[str, int | None]]


def session_time(text: str) -> datetime:
    """LoCoMo writes "1:56 pm on 8 May, 2023"."""
    return datetime.strptime(" ".join(text.split()), _SESSION_TIME)


def evidence_ids(raw: list[Any]) -> frozenset[str]:
    """Evidence as "D<session>:<turn>"; a few labels are written oddly ("D8:6; D9:17")."""
    found: set[str] = set()
    for item in raw:
        found.update(f"D{s}:{t}" for s, t in _EVIDENCE.findall(str(item)))
    return frozenset(found)


def session_of(dia_id: str) -> str:
    return dia_id.split(":", 1)[0]


def _sessions(conversation: dict[str, Any]) -> list[tuple[datetime, list[dict[str, Any]]]]:
    numbers = sorted(int(key.split("_")[1]) for key in conversation
                     if re.fullmatch(r"session_\d+", key) and isinstance(conversation[key], list))
    return [(session_time(conversation[f"session_{n}_date_time"]), conversation[f"session_{n}"]) for n in numbers]


def _build(path: str, samples: list[dict[str, Any]]) -> Corpus:
    corpus = Corpus()
    with SqliteBulkLoader(path) as load:
        for index, sample in enumerate(samples):
            agent_id = index + 2  # agent 1 is the owner's, empty here
            chat = f"tg:-100{index + 1}"
            sessions = _sessions(sample["conversation"])
            first = sessions[0][0].strftime("%Y-%m-%d %H:%M:%S")
            load.agents([NewAgent(agent_id, f"Group {index + 1}", first)])
            load.chat_agents([NewChatAgent(chat, agent_id, first)])
            load.conversations([NewConversation(chat, agent_id, "telegram", chat, first)])
            rows: list[NewMessage] = []
            dia_ids: list[str] = []
            observed = sample.get("observation") or {}
            for began, turns in sessions:
                for number, turn in enumerate(turns):
                    stamp = (began + timedelta(seconds=TURN_SECONDS * number)).strftime("%Y-%m-%d %H:%M:%S")
                    speaker = str(turn["speaker"])
                    rows.append(NewMessage(chat, "user", f"[{speaker}] {turn['text']}", stamp, token_count=10,
                                           sender_id=speaker.lower(), sender_name=speaker))
                    dia_ids.append(str(turn["dia_id"]))
            corpus.asked_on[agent_id] = (sessions[-1][0] + timedelta(days=1)).replace(tzinfo=timezone.utc)
            message_ids = load.messages(rows)
            for message_id, dia_id in zip(message_ids, dia_ids, strict=True):
                corpus.dia_of[message_id] = dia_id
                corpus.agent_of[message_id] = agent_id
                corpus.messages += 1
            corpus.sessions.extend(_observed_sessions(rows, message_ids, dia_ids, observed))
            for qa in sample["qa"]:
                evidence = evidence_ids(qa.get("evidence") or [])
                if qa.get("category") in CATEGORIES and evidence:
                    corpus.questions.append(Question(agent_id, str(qa["question"]), int(qa["category"]), evidence))
    return corpus


def _observed_sessions(rows: list[NewMessage], message_ids: list[int], dia_ids: list[str],
                       observed: dict[str, Any]) -> list[Session]:
    """Each session's stored turns with its observations: what an extraction of it would write."""
    sessions: dict[str, Session] = {}
    message_of: dict[str, int] = {}
    for row, message_id, dia_id in zip(rows, message_ids, dia_ids, strict=True):
        message_of[dia_id] = message_id
        sessions.setdefault(session_of(dia_id), Session([], [])).turns.append(MessageRecord(
            message_id, row.conversation_id, row.role, row.content, row.token_count, row.sender_id,
            row.sender_name, row.create_time))
    for key, facts in observed.items():
        found = re.fullmatch(r"session_(\d+)_observation", key)
        session = sessions.get(f"D{found[1]}") if found else None
        if session is None or not isinstance(facts, dict):
            continue
        for said in facts.values():
            for fact, source in said:
                named = sorted(evidence_ids([source]))
                session.facts.append((str(fact), message_of.get(named[0]) if named else None))
    return list(sessions.values())


@dataclass(slots=True)
class _Tally:
    questions: int = 0
    recall: float = 0.0
    hit: int = 0
    shown: int = 0
    session_recall: float = 0.0

    def add(self, recall: float, hit: bool, shown: bool, session_recall: float) -> None:
        self.questions += 1
        self.recall += recall
        self.hit += hit
        self.shown += shown
        self.session_recall += session_recall

    def figures(self) -> dict[str, Any]:
        n = max(self.questions, 1)
        return {"questions": self.questions, "recall_at_5": round(self.recall / n, 3),
                "hit_at_5": round(self.hit / n, 3), "shown_at_5": round(self.shown / n, 3),
                "session_recall_at_5": round(self.session_recall / n, 3)}


async def _semantic(core: Core, client: EmbeddingClient, address: str, report: dict[str, Any]) -> SemanticRanking:
    """Every message's vector through the daemon's backfill, then the search that uses them."""
    store = EmbeddingRepository(core.db)
    health = EndpointHealth(address)
    began = time.perf_counter()
    made = await EmbeddingBackfill(client, store, health, batch_size=64).fill()
    report["embeddings"] = {"model": client.model, "vectors": made,
                            "backfill_s": round(time.perf_counter() - began, 1)}
    return SemanticSearch(client, store, health, timeout=30.0)  # a slow model must not fall back here


async def _ask(path: Path, corpus: Corpus, embeddings: EmbeddingsConfig | Literal["builtin"] | None = None,
               storage_url: str = "") -> dict[str, Any]:
    total = _Tally()
    by_category: dict[int, _Tally] = defaultdict(_Tally)
    latencies: list[float] = []
    leaked = 0
    report: dict[str, Any] = {}
    async with open_core(make_config(path.parent, storage={"url": storage_url})) as core, AsyncExitStack() as stack:
        semantic = None
        memory_before = resident_mb()
        if embeddings is not None:
            client: EmbeddingClient
            if isinstance(embeddings, str):
                client, address = await stack.enter_async_context(BuiltinEmbedder()), "builtin"
            else:
                client, address = await stack.enter_async_context(OpenAIEmbeddingClient(embeddings)), embeddings.base_url
            semantic = await _semantic(core, client, address, report)
        # Asked the day after each conversation's last session: "last year" is a year before it.
        services = {agent: MemorySearchService(core.repos.search, semantic, clock=functools.partial(_same, day))
                    for agent, day in corpus.asked_on.items()}
        for question in corpus.questions:
            began = time.perf_counter()
            result = await services[question.agent_id].search(question.agent_id, question.text, LIMIT)
            latencies.append(time.perf_counter() - began)
            hits = [int(r["messageId"]) for r in result["results"] if r.get("messageId") is not None]
            leaked += sum(1 for m in hits if corpus.agent_of.get(m) != question.agent_id)
            found = {corpus.dia_of[m] for m in hits if m in corpus.dia_of}
            shown = found | {corpus.dia_of[int(c["messageId"])] for r in result["results"]
                             for c in r.get("context", ()) if int(c["messageId"]) in corpus.dia_of}
            sessions = {session_of(d) for d in question.evidence}
            figures = (len(found & question.evidence) / len(question.evidence), bool(found & question.evidence),
                       bool(shown & question.evidence), len(sessions & {session_of(d) for d in found}) / len(sessions))
            total.add(*figures)
            by_category[question.category].add(*figures)
    return {
        **total.figures(),
        "by_category": {CATEGORIES[c]: by_category[c].figures() for c in sorted(by_category)},
        "p50_ms": ms(percentile(latencies, 50)),
        "p95_ms": ms(percentile(latencies, 95)),
        "messages": corpus.messages,
        "leaked": leaked,
        "resident_mb": resident_mb(),
        **({"extra_memory_mb": round(resident_mb() - memory_before, 1)} if embeddings is not None else {}),
        **report,
    }


_COMPARED = ("recall_at_5", "hit_at_5", "shown_at_5", "session_recall_at_5")


def _on_postgres(target: str, path: Path, corpus: Corpus, embeddings: EmbeddingsConfig | None,
                 sqlite: dict[str, Any]) -> dict[str, Any]:
    """The same questions on a copy of the database in PostgreSQL (matebot migrate's copy)."""
    with contextlib.ExitStack() as stack:
        if target == "local":
            from tests.support.postgres import throwaway_cluster

            target = stack.enter_context(throwaway_cluster()).url("postgres")
        figures = asyncio.run(_copy_and_ask(target, path, corpus, embeddings))
    gaps = {name: round(abs(figures[name] - sqlite[name]), 3) for name in _COMPARED}
    gaps.update({f"{category}.{name}": round(abs(figures["by_category"][category][name]
                                                 - sqlite["by_category"][category][name]), 3)
                 for category in figures["by_category"] for name in _COMPARED})
    return {**figures, "largest_gap_to_sqlite": max(gaps.values()), "gaps": gaps}


async def _copy_and_ask(url: str, path: Path, corpus: Corpus, embeddings: EmbeddingsConfig | None) -> dict[str, Any]:
    from bot.storage.postgres.copy import copy_sqlite
    from bot.storage.postgres.database import PostgresDatabase

    async with PostgresDatabase(url) as postgres:
        counts = await copy_sqlite(path, postgres)
    if any(c.source_rows != c.target_rows for c in counts):
        raise RuntimeError(f"the copy into {url} lost rows: {counts}")
    return await _ask(path, corpus, embeddings, storage_url=url)


def _same(day: datetime) -> datetime:
    return day


async def _link_facts(path: Path, corpus: Corpus) -> dict[str, Any]:
    """LoCoMo's observations of each session, written as an extraction of that session would write
    its daily entry: each fact linked by the daemon's own rule (memory/extraction/facts.py) to a
    turn of the session. LoCoMo's label of each fact's turn only counts how often that link agrees."""
    total = linked = right = 0
    async with open_core(make_config(path.parent)) as core:
        for session in corpus.sessions:
            source = dict(session.facts)
            links = linked_facts("\n".join(f"- {fact}" for fact, _ in session.facts), session.turns)
            await core.repos.facts.link(links)
            total += len(session.facts)
            linked += len(links)
            right += sum(1 for link in links if source.get(link.fact) == link.message_id)
    return {"facts": total, "linked": linked, "linked_to_labelled_turn": right}


async def _schema(path: Path) -> None:
    async with open_core(make_config(path.parent)) as core:
        await core.agents.ensure_configured()


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a LoCoMo JSON file")
    parser.add_argument("--embeddings", metavar="BASE_URL",
                        help="an OpenAI-compatible embeddings server: fuse semantic search with the lexical one")
    parser.add_argument("--embeddings-model", default="text-embedding-3-small", help="the model name it is sent")
    parser.add_argument("--no-facts", action="store_true",
                        help="leave out the facts of LoCoMo's observations (by default each session's are "
                             "linked to its turns, as an extraction's daily entry is)")
    parser.add_argument("--no-builtin", action="store_true",
                        help="leave out the run with the builtin embedder (by default it runs when installed)")
    parser.add_argument("--postgres", metavar="URL",
                        help="also search a copy on PostgreSQL (an empty database's URL, or `local` for a throwaway "
                             "cluster of Debian's server) and print its figures beside SQLite's")
    args = parser.parse_args(argv)
    embeddings = None
    if args.embeddings:
        try:
            embeddings = EmbeddingsConfig(base_url=args.embeddings, model=args.embeddings_model,
                                          api_key=os.environ.get("EMBEDDINGS_API_KEY", ""))
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"].removeprefix("Value error, ")
            print(f"recall_locomo: --embeddings {args.embeddings}: {problem}", file=sys.stderr)
            return None
    if not args.data.is_file():
        print(f"recall_locomo: {args.data} not found; this bench needs LoCoMo data (evaluation only, "
              "not shipped with matebot)", file=sys.stderr)
        return None
    quiet_logs()
    load = HostLoad()
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="matebot-locomo-") as folder:
        path = Path(folder) / "mate.db"
        asyncio.run(_schema(path))
        corpus = _build(str(path), samples)
        facts = None if args.no_facts else asyncio.run(_link_facts(path, corpus))
        try:
            figures = asyncio.run(_ask(path, corpus, embeddings))
            if args.postgres:
                figures["postgresql"] = _on_postgres(args.postgres, path, corpus, embeddings, figures)
        except EmbeddingFailed as exc:
            print(f"recall_locomo: the embeddings server {args.embeddings} failed: {exc}", file=sys.stderr)
            return None
        if embeddings is None and not args.no_builtin:
            try:  # the same questions again, with the builtin embedder's vectors fused
                figures["builtin"] = asyncio.run(_ask(path, corpus, "builtin"))
            except BuiltinUnavailable as exc:
                figures["builtin"] = {"skipped": str(exc)}
        result = {"bench": "recall_locomo", "data": args.data.name, "conversations": len(samples),
                  "facts": facts or "left out", **figures,
                  "target": "shown_at_5 >= 0.92, recall_at_5 >= 0.65, p95_ms <= 30 (PostgreSQL: every figure "
                            "within 0.03 of SQLite's)"}
    return emit(result, load)


if __name__ == "__main__":
    main()
