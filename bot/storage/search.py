"""SQL for the search index (mate_search_text, mate_search_trigram, mate_search_scope), read-only: triggers keep it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from bot.storage.database import Database
from bot.storage.remembered import NOT_INCOGNITO
from bot.storage.search_text import spaced

T = TypeVar("T")

# Substring matches look at no more than this many of the agent's rows (its newest
# matches): a common substring of a short query must not make one search read them all.
SUBSTRING_SCAN = 2000


@dataclass(frozen=True, slots=True)
class SearchHit:
    key: int  # the index rowid: message id * 2, or file piece id * 2 + 1 (mate_file_piece)
    source: str  # notes | conversations
    body: str
    time: str
    conversation_id: str | None = None
    message_id: int | None = None
    filename: str | None = None
    score: float = 0.0  # the word ranking's BM25 score, lower is better; 0.0 when not ranked by words


@dataclass(frozen=True, slots=True)
class ContextMessage:
    id: int
    role: str
    content: str
    time: str


class SearchReads(Protocol):
    """The reads one search makes, on either backend, from a thread of its own (see together)."""

    def words(self, agent_id: int, phrases: Sequence[str], source: str, limit: int,
              dates: Sequence[str] = ()) -> list[SearchHit]: ...

    def words_on_dates(self, agent_id: int, phrases: Sequence[str], dates: Sequence[str], source: str,
                       limit: int) -> list[SearchHit]: ...

    def substring(self, agent_id: int, text: str, source: str, limit: int) -> list[SearchHit]: ...

    def around(self, messages: Sequence[tuple[str, int]], count: int) -> list[list[ContextMessage]]: ...


class SearchRepository(Protocol):
    async def together(self, work: Callable[[SearchReads], T]) -> T:
        """`work` given the search's reads: everything a search reads and decides, in one go."""
        ...


class SearchIndex(Protocol):
    async def merge(self) -> None:
        """Keep the index quick after a day of writes (the nightly consolidation calls it)."""
        ...


_HIT_COLUMNS = "t.rowid, t.source, t.body, t.time, t.conversation_id, t.ref_id, t.filename"


# A word search keeps to one agent's rows by looking each match up in mate_search_scope (and
# to notes or conversations by the key's parity), not with the scope word in the MATCH
# expression: bm25 counts the rows of every phrase in the expression, and the scope word's
# are all of the agent's rows (5 ms a search at 100 000 messages, for a word that weighs 0).
# The lookup runs before bm25, so another agent's matches are never ranked.
_SOURCE_KEYS = {"all": "", "notes": " AND s.rowid % 2 = 1", "conversations": " AND s.rowid % 2 = 0"}


def fts_phrase(term: str) -> str:
    """A term (or words) as an FTS5 phrase; CJK characters are spaced as the index stores them."""
    return '"' + spaced(term).strip().replace('"', '""') + '"'


def fts_expression(phrases: Sequence[str]) -> str:
    """Phrases OR-ed: any of them makes a hit; BM25 ranks the rows with more and rarer ones first."""
    return " OR ".join(fts_phrase(p) for p in phrases)


def words_match(phrases: Sequence[str], dates: Sequence[str] = ()) -> str:
    """The word index's MATCH expression for rows holding any of `phrases` in the message or in
    the turn before it, or, given `dates` (phrases of the date column: "7 may 2023",
    "sunday"), written on one of those dates. The date column is matched by those phrases
    only: a word of the query ("may", "3") is no date."""
    found = f"{{body prev facts}} : ({fts_expression(phrases)})"
    return f"{found} OR date : ({fts_expression(dates)})" if dates else found


def _ranked(agent_id: int, source: str) -> str:
    """SQL: (id, score) of the agent's rows matching the next MATCH parameter, best BM25 first."""
    # CROSS JOIN keeps the matches the outer loop, each looked up by its key (a correlated
    # subquery there costs a fifth more).
    return ("SELECT s.rowid AS id, bm25(mate_search_text, 1.0, 0.0, 0.4, 1.0, 1.0) AS score FROM mate_search_text s "
            "CROSS JOIN mate_search_scope k ON k.key = s.rowid "
            f"WHERE mate_search_text MATCH ? AND k.agent_id = {int(agent_id)}{_SOURCE_KEYS[source]} "
            "ORDER BY score LIMIT ?")


class SqliteSearchRepository:
    """The search's reads (SqliteSearchReads), run together on the database's thread."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def together(self, work: Callable[[SearchReads], T]) -> T:
        """`work` given the search's reads, run on the database's thread: all the reads of a
        search, and what it decides between them, in one hop (Database.read_together)."""
        return await self._db.read_together(lambda conn: work(SqliteSearchReads(conn)))


class SqliteSearchReads:
    """The search's SQL on a connection of Database.read_together (its thread, one snapshot)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def words(self, agent_id: int, phrases: Sequence[str], source: str, limit: int,
              dates: Sequence[str] = ()) -> list[SearchHit]:
        """The agent's rows holding any of `phrases` (or written on one of `dates`), best BM25
        first (the scope column weighs nothing), newer first on a tie."""
        return self._hits(f"SELECT * FROM ({_ranked(agent_id, source)})", (words_match(phrases, dates), limit * 2),
                          limit)

    def words_on_dates(self, agent_id: int, phrases: Sequence[str], dates: Sequence[str], source: str,
                       limit: int) -> list[SearchHit]:
        """The agent's rows holding any of `phrases`, ranked as `words(phrases, dates=dates)`
        ranks them: the rows of those dates move up, and no row is found by its date alone.

        A query's "May" or "Tuesdays" must not make every row of May a match, each to be
        ranked (a seventh of the index for a weekday). Two rankings instead: the rows with
        the words, by the words; and those of them with the dates, by words and dates. bm25
        gives a row's words the same score in both (each phrase's weight is counted over the
        whole index), so the better of its two scores is the one the single search would
        give it, and the best `limit` of both are the best `limit` of the rows with the words.
        """
        both = words_match(phrases)
        return self._hits(
            f"SELECT id, MIN(score) AS score FROM (SELECT * FROM ({_ranked(agent_id, source)}) UNION ALL "
            f"SELECT * FROM ({_ranked(agent_id, source)})) GROUP BY id",
            (both, limit * 2, f"({both}) AND date : ({fts_expression(dates)})", limit * 2), limit)

    def _hits(self, ranked: str, parameters: tuple[object, ...], limit: int) -> list[SearchHit]:
        rows = self._conn.execute(
            f"SELECT {_HIT_COLUMNS}, c.score FROM ({ranked}) c JOIN mate_search_trigram t ON t.rowid = c.id "
            "ORDER BY c.score, t.time DESC LIMIT ?", (*parameters, limit)).fetchall()
        return [hit_of(row) for row in rows]

    def substring(self, agent_id: int, text: str, source: str, limit: int) -> list[SearchHit]:
        """The agent's newest rows containing `text` (3 characters or more, any case), also
        inside words ("penicil" finds "penicillin").

        The scan reads only this agent's rows (the index's scope column): another agent's
        thousands of newer matches neither take the places of this agent's own nor cost time.
        """
        quoted = '"' + text.replace('"', '""') + '"'
        scope = f"={int(agent_id)}=" + {"all": "", "notes": "n", "conversations": "c"}[source]
        rows = self._conn.execute(
            f"SELECT * FROM (SELECT {_HIT_COLUMNS} FROM mate_search_trigram t WHERE mate_search_trigram MATCH ? "
            "ORDER BY t.rowid DESC LIMIT ?) ORDER BY time DESC LIMIT ?",
            (f'scope : "{scope}" AND body : {quoted}', SUBSTRING_SCAN, limit)).fetchall()
        return [hit_of(row) for row in rows]

    def around(self, messages: Sequence[tuple[str, int]], count: int) -> list[list[ContextMessage]]:
        """For each (conversation id, message id): up to `count` searched messages before and
        after it, in order (the message itself left out). One query for all of them."""
        if not messages:
            return []
        return around_found(self._conn.execute(*around_query(messages, count)).fetchall(), len(messages))


def around_query(messages: Sequence[tuple[str, int]], count: int) -> tuple[str, tuple[object, ...]]:
    """SQL and parameters (both backends) of the `count` messages either side of each message."""
    # Off-the-record messages are never shown, not even as the context of a hit before them.
    side = ("SELECT * FROM (SELECT {n}, id, role, content, create_time FROM mate_message WHERE conversation_id = ? "
            "AND id {op} ? AND role IN ('user', 'assistant') AND content_format = 'text' AND "
            + NOT_INCOGNITO.format(m="mate_message")
            + " ORDER BY id {order} LIMIT ?) AS side")
    return (" UNION ALL ".join(side.format(n=n, op=op, order=order) for n in range(len(messages))
                               for op, order in (("<", "DESC"), (">", "ASC"))),
            tuple(value for conversation, message in messages for _ in "ba" for value in (conversation, message, count)))


def around_found(rows: Sequence[Any], n: int) -> list[list[ContextMessage]]:
    """around_query's rows as each message's context, in order."""
    found: list[list[ContextMessage]] = [[] for _ in range(n)]
    for row in sorted(rows, key=lambda r: int(r[1])):
        found[int(row[0])].append(ContextMessage(int(row[1]), str(row[2]), str(row[3]), str(row[4])))
    return found


def hit_of(row: Any) -> SearchHit:
    """A hit from a row of (key, source, body, time, conversation id, ref id, filename[, score])."""
    is_message = row[1] == "conversations"
    return SearchHit(key=int(row[0]), source=str(row[1]), body=str(row[2]), time=str(row[3] or ""),
                     conversation_id=row[4] if is_message else None,
                     message_id=int(row[5]) if is_message else None,
                     filename=None if is_message else row[6], score=float(row[7]) if len(row) > 7 else 0.0)
