"""SQL for the search index (mate_search_text, mate_search_trigram), read-only: triggers keep it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.storage.database import Database

# Which rows a source filter keeps ("all" keeps both).
SOURCES = {"notes": ("notes",), "conversations": ("conversations",), "all": ("notes", "conversations")}


@dataclass(frozen=True, slots=True)
class SearchHit:
    key: int  # the index rowid: message id * 2, or workspace file id * 2 + 1
    source: str  # notes | conversations
    body: str
    time: str
    conversation_id: str | None = None
    message_id: int | None = None
    filename: str | None = None


@dataclass(frozen=True, slots=True)
class ContextMessage:
    id: int
    role: str
    content: str
    time: str


_HIT_COLUMNS = "t.rowid, t.source, t.body, t.time, t.conversation_id, t.ref_id, t.filename"


class SqliteSearchRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def words(self, agent_id: int, expression: str, source: str, limit: int) -> list[SearchHit]:
        """Hits of an FTS5 expression on the word index, best BM25 first, newer first on a tie.

        The best rows of all agents are picked first and only those are looked up and
        filtered: joining every matching row before sorting costs several times more when
        a word is common. If other agents' rows crowd the pick, a larger one is taken."""
        sources = SOURCES[source]
        pick = limit * 4
        while True:
            rows = await self._db.fetchall(
                f"SELECT {_HIT_COLUMNS} FROM (SELECT rowid AS id, bm25(mate_search_text) AS score "
                "FROM mate_search_text WHERE mate_search_text MATCH ? ORDER BY score LIMIT ?) c "
                "JOIN mate_search_trigram t ON t.rowid = c.id "
                f"WHERE t.agent_id = ? AND t.source IN ({_marks(sources)}) ORDER BY c.score, t.time DESC LIMIT ?",
                (expression, pick, agent_id, *sources, limit))
            if len(rows) >= limit or await self.matches(expression) <= pick:
                return [_hit(row) for row in rows]
            pick *= 8

    async def matches(self, expression: str) -> int:
        """How many rows (of every agent) an FTS5 expression matches on the word index."""
        row = await self._db.fetchone("SELECT COUNT(*) FROM mate_search_text WHERE mate_search_text MATCH ?",
                                      (expression,))
        return int(row[0]) if row else 0

    async def phrase(self, agent_id: int, phrase: str, source: str, limit: int) -> list[SearchHit]:
        """Rows that contain `phrase` (3 characters or more, any case), newest first."""
        sources = SOURCES[source]
        quoted = '"' + phrase.replace('"', '""') + '"'
        rows = await self._db.fetchall(
            f"SELECT {_HIT_COLUMNS} FROM mate_search_trigram t "
            f"WHERE mate_search_trigram MATCH ? AND t.agent_id = ? AND t.source IN ({_marks(sources)}) "
            "ORDER BY t.time DESC LIMIT ?",
            (quoted, agent_id, *sources, limit))
        return [_hit(row) for row in rows]

    async def around(self, conversation_id: str, message_id: int, count: int) -> list[ContextMessage]:
        """Up to `count` searched messages before and after one, in order (the message itself left out)."""
        searched = "role IN ('user', 'assistant') AND content_format = 'text'"
        before = await self._db.fetchall(
            f"SELECT id, role, content, create_time FROM mate_message WHERE conversation_id = ? AND id < ? "
            f"AND {searched} ORDER BY id DESC LIMIT ?", (conversation_id, message_id, count))
        after = await self._db.fetchall(
            f"SELECT id, role, content, create_time FROM mate_message WHERE conversation_id = ? AND id > ? "
            f"AND {searched} ORDER BY id LIMIT ?", (conversation_id, message_id, count))
        return [ContextMessage(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in [*reversed(before), *after]]


def _marks(values: tuple[str, ...]) -> str:
    return ", ".join("?" for _ in values)


def _hit(row: Any) -> SearchHit:
    is_message = row[1] == "conversations"
    return SearchHit(key=int(row[0]), source=str(row[1]), body=str(row[2]), time=str(row[3] or ""),
                     conversation_id=row[4] if is_message else None,
                     message_id=int(row[5]) if is_message else None,
                     filename=None if is_message else row[6])
