"""Search on PostgreSQL: the same reads as SQLite's (bot/storage/search.py) over mate_search, its
`words` tsvector (ts_rank, the turn before weighing 0.4), its `dates` and a trigram index."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from bot.storage.postgres.database import PostgresDatabase
from bot.storage.search import SUBSTRING_SCAN, ContextMessage, SearchHit, SearchReads, around_found, around_query, hit_of

T = TypeVar("T")

_HIT_COLUMNS = "s.key, s.source, s.body, s.time, s.conversation_id, s.ref_id, s.filename"
_SOURCES = {"all": "", "notes": " AND s.source = 'notes'", "conversations": " AND s.source = 'conversations'"}
# ts_rank counts how often a phrase occurs, not how rare it is: each phrase's rank is weighed by its
# inverse document frequency over the whole index (as SQLite's bm25 counts its phrases), its rows
# counted up to DF_CAP (beyond that a phrase weighs next to nothing either way).
DF_CAP = 10_000
_WEIGHED = ("WITH phrase AS MATERIALIZED (SELECT mate_search_query(ARRAY[p]) AS q FROM unnest(CAST(? AS text[])) p), "
            "docs AS (SELECT GREATEST((SELECT reltuples FROM pg_class WHERE oid = 'mate_search'::regclass), "
            f"(SELECT count(*) FROM (SELECT 1 FROM mate_search LIMIT {DF_CAP}) a)) AS n), "
            "weighed AS MATERIALIZED (SELECT phrase.q, ln(1 + (docs.n - df.n + 0.5) / (df.n + 0.5)) AS idf FROM phrase, docs, "
            f"LATERAL (SELECT count(*) AS n FROM (SELECT 1 FROM mate_search x WHERE x.words @@ phrase.q LIMIT {DF_CAP}) c) df "
            "WHERE phrase.q IS NOT NULL) ")
# A row's score: over the query's phrases, idf x r / (r + 3), r the phrase's ts_rank in the row
# (weights for D, C, B, A: the message itself (A) 1, the turn before it (B) 0.6, the facts taken
# from it (C) 1, as on SQLite; normalised by
# 1 + log(length)). r / (r + k) saturates as bm25's k1 does. Chosen on LoCoMo's dev half against
# SQLite's bm25 (every figure within 0.027 of it; bench.recall_locomo --postgres): without the idf
# recall@5 was 0.605, with a plain sum of ranks 0.640, with the turn before at 0.4 0.651.
_RANK = ("(SELECT sum(w.idf * x.r / (x.r + 3)) FROM weighed w, "
         "LATERAL (SELECT ts_rank('{0, 1, 0.6, 1}', s.words, w.q, 1) AS r) x)")


def _like_pattern(text: str) -> str:
    """`text` anywhere, as an ILIKE pattern: its own % _ and backslashes match themselves."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class PostgresSearchRepository:
    """The search's reads run from a worker thread, each a query on the pool: the search's logic
    (memory/recall/search.py) is the same code on both backends."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def together(self, work: Callable[[SearchReads], T]) -> T:
        reads = PostgresSearchReads(self._db, asyncio.get_running_loop())
        return await asyncio.to_thread(work, reads)


class PostgresSearchIndex:
    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def merge(self) -> None:
        """Fresh planner statistics after a day of writes (PostgreSQL merges its indexes itself)."""
        await self._db.execute("ANALYZE mate_search")


class PostgresSearchReads:
    """SearchReads on PostgreSQL, called from a worker thread: each read runs on the event loop."""

    def __init__(self, db: PostgresDatabase, loop: asyncio.AbstractEventLoop) -> None:
        self._db = db
        self._loop = loop

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]:
        call: Coroutine[Any, Any, list[Any]] = self._db.fetchall(sql, params)
        return asyncio.run_coroutine_threadsafe(call, self._loop).result()

    def words(self, agent_id: int, phrases: Sequence[str], source: str, limit: int,
              dates: Sequence[str] = ()) -> list[SearchHit]:
        if dates:
            match = "(s.words @@ q.words OR s.dates @@ q.dates)"
            score = f"-({_RANK} + ts_rank(s.dates, q.dates))"
        else:
            match, score = "s.words @@ q.words", f"-{_RANK}"
        return self._ranked(agent_id, phrases, dates, source, limit, match, score)

    def words_on_dates(self, agent_id: int, phrases: Sequence[str], dates: Sequence[str], source: str,
                       limit: int) -> list[SearchHit]:
        # The rows with the words, those written on the dates ranked up: no row found by its date alone.
        score = f"-({_RANK} + CASE WHEN s.dates @@ q.dates THEN ts_rank(s.dates, q.dates) ELSE 0 END)"
        return self._ranked(agent_id, phrases, dates, source, limit, "s.words @@ q.words", score)

    def _ranked(self, agent_id: int, phrases: Sequence[str], dates: Sequence[str], source: str, limit: int,
                match: str, score: str) -> list[SearchHit]:
        rows = self._fetch(
            f"{_WEIGHED}SELECT {_HIT_COLUMNS}, {score} AS score FROM mate_search s, "
            "(SELECT mate_search_query(CAST(? AS text[])) AS words, mate_search_query(CAST(? AS text[])) AS dates) q "
            f"WHERE s.agent_id = ?{_SOURCES[source]} AND {match} ORDER BY score, s.time DESC LIMIT ?",
            (list(phrases), list(phrases), list(dates), agent_id, limit))
        return [hit_of(row) for row in rows]

    def substring(self, agent_id: int, text: str, source: str, limit: int) -> list[SearchHit]:
        rows = self._fetch(
            f"SELECT * FROM (SELECT {_HIT_COLUMNS} FROM mate_search s WHERE s.agent_id = ?{_SOURCES[source]} "
            "AND s.body ILIKE ? ORDER BY s.key DESC LIMIT ?) AS newest ORDER BY time DESC LIMIT ?",
            (agent_id, _like_pattern(text), SUBSTRING_SCAN, limit))
        return [hit_of(row) for row in rows]

    def around(self, messages: Sequence[tuple[str, int]], count: int) -> list[list[ContextMessage]]:
        if not messages:
            return []
        return around_found(self._fetch(*around_query(messages, count)), len(messages))
