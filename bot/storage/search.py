"""SQL for the search index (mate_search_text, mate_search_trigram), read-only: triggers keep it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.storage.database import Database

SOURCES = ("all", "notes", "conversations")
# Substring matches look at no more than this many of the agent's rows (its newest
# matches): a common substring of a short query must not make one search read them all.
SUBSTRING_SCAN = 2000


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


def _scoped(agent_id: int, source: str, body_expression: str) -> str:
    """An FTS5 expression matched against one agent's (and one source's) rows only."""
    scope = f'scope : "agent{int(agent_id)}"'
    if source != "all":
        scope += f' AND scope : "{source}"'
    return f"{scope} AND {{body prev date}} : ({body_expression})"


class SqliteSearchRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def words(self, agent_id: int, body_expression: str, source: str, limit: int) -> list[SearchHit]:
        """The agent's rows matching an FTS5 expression on the word index, best BM25 first
        (the scope column weighs nothing), newer first on a tie."""
        rows = await self._db.fetchall(
            f"SELECT {_HIT_COLUMNS} FROM (SELECT rowid AS id, bm25(mate_search_text, 1.0, 0.0, 0.4, 1.0) AS score "
            "FROM mate_search_text WHERE mate_search_text MATCH ? ORDER BY score LIMIT ?) c "
            "JOIN mate_search_trigram t ON t.rowid = c.id ORDER BY c.score, t.time DESC LIMIT ?",
            (_scoped(agent_id, source, body_expression), limit * 2, limit))
        return [_hit(row) for row in rows]

    async def substring(self, agent_id: int, text: str, source: str, limit: int) -> list[SearchHit]:
        """The agent's newest rows containing `text` (3 characters or more, any case), also
        inside words ("penicil" finds "penicillin").

        The scan reads only this agent's rows (the index's scope column): another agent's
        thousands of newer matches neither take the places of this agent's own nor cost time.
        """
        quoted = '"' + text.replace('"', '""') + '"'
        scope = f"={int(agent_id)}=" + {"all": "", "notes": "n", "conversations": "c"}[source]
        rows = await self._db.fetchall(
            f"SELECT * FROM (SELECT {_HIT_COLUMNS} FROM mate_search_trigram t WHERE mate_search_trigram MATCH ? "
            "ORDER BY t.rowid DESC LIMIT ?) ORDER BY time DESC LIMIT ?",
            (f'scope : "{scope}" AND body : {quoted}', SUBSTRING_SCAN, limit))
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


def _hit(row: Any) -> SearchHit:
    is_message = row[1] == "conversations"
    return SearchHit(key=int(row[0]), source=str(row[1]), body=str(row[2]), time=str(row[3] or ""),
                     conversation_id=row[4] if is_message else None,
                     message_id=int(row[5]) if is_message else None,
                     filename=None if is_message else row[6])
