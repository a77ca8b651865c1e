"""SQL for mate_embedding: the vectors of searched messages and workspace file pieces, per agent and model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.storage.remembered import NOT_INCOGNITO
from bot.storage.search import SearchHit, hit_of
from bot.storage.sql import SqlDatabase

# What the search index holds (migrations: _SEARCHED_MESSAGE); blank texts have nothing to embed.
_SEARCHED_MESSAGE = "m.role IN ('user', 'assistant') AND m.content_format = 'text' AND trim(m.content) <> ''"
_SOURCE_PARITY = {"notes": 1, "conversations": 0}
# A file piece's text as the index holds it: SQLite counts a piece in bytes, PostgreSQL in characters.
_PIECE_TEXT = {"sqlite": "CAST(substr(CAST(f.content AS BLOB), p.start + 1, p.length) AS TEXT)",
               "postgresql": "substr(f.content, CAST(p.start AS INTEGER) + 1, CAST(p.length AS INTEGER))"}
# The index's row of a key: (its table, its key column).
_INDEX = {"sqlite": ("mate_search_trigram", "rowid"), "postgresql": ("mate_search", "key")}


@dataclass(frozen=True, slots=True)
class PendingText:
    """A searched text without a vector of the current model."""

    key: int  # the search index rowid: message id * 2, file piece id * 2 + 1
    agent_id: int
    text: str


@dataclass(frozen=True, slots=True)
class StoredVector:
    key: int
    agent_id: int
    text: str  # the text it was made of: stored only while the index still holds that text
    dim: int  # 0: the endpoint refused the text; kept so it is not asked again
    vector: bytes
    norm: float


class EmbeddingRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db
        self._piece_text = _PIECE_TEXT[db.backend]
        self._index, self._key = _INDEX[db.backend]

    async def drop_other_models(self, model: str) -> int:
        """Forget every other model's vectors: they cannot be compared with this one's."""
        result = await self._db.execute("DELETE FROM mate_embedding WHERE model <> ?", (model,))
        return result.rowcount

    async def missing_files(self, model: str, limit: int) -> list[PendingText]:
        """Pieces of live workspace files (mate_file_piece: a file, or an entry appended to it)
        without a vector."""
        rows = await self._db.fetchall(
            f"SELECT p.id * 2 + 1, f.agent_id, {self._piece_text} FROM mate_file_piece p "
            "JOIN mate_workspace_file f ON f.id = p.file_id WHERE f.deleted = 0 "
            f"AND trim({self._piece_text}) <> '' AND NOT EXISTS (SELECT 1 FROM mate_embedding e "
            "WHERE e.key = p.id * 2 + 1 AND e.model = ?) ORDER BY p.id LIMIT ?", (model, limit))
        return [PendingText(int(r[0]), int(r[1]), str(r[2])) for r in rows]

    async def last_message_id(self) -> int:
        row = await self._db.fetchone("SELECT COALESCE(MAX(id), 0) FROM mate_message")
        return int(row[0]) if row else 0

    async def missing_messages(self, model: str, after: int, limit: int) -> list[PendingText]:
        """Searched messages after id `after` without a vector, oldest first.

        Messages are never edited, so the caller walks forward from where it stopped instead
        of reading every message again."""
        rows = await self._db.fetchall(
            "SELECT m.id * 2, c.agent_id, m.content FROM mate_message m "
            "JOIN mate_conversation c ON c.id = m.conversation_id "
            f"WHERE m.id > ? AND {_SEARCHED_MESSAGE} AND {NOT_INCOGNITO.format(m='m')} "
            "AND NOT EXISTS (SELECT 1 FROM mate_embedding e "
            "WHERE e.key = m.id * 2 AND e.model = ?) ORDER BY m.id LIMIT ?", (after, model, limit))
        return [PendingText(int(r[0]), int(r[1]), str(r[2])) for r in rows]

    async def store(self, model: str, vectors: Sequence[StoredVector]) -> None:
        """One transaction. A text changed or removed while it was embedded gets no vector (its
        trigger had nothing to delete yet): each row is checked against the index's text."""
        if not vectors:
            return
        now = self._db.now()
        async with self._db.transaction() as conn:
            await conn.executemany(
                "INSERT INTO mate_embedding(key, model, agent_id, dim, vector, norm, create_time) "
                "SELECT ?, ?, ?, ?, ?, ?, ? "
                f"WHERE EXISTS (SELECT 1 FROM {self._index} t WHERE t.{self._key} = ? AND t.body = ?) "
                "ON CONFLICT(key, model) DO UPDATE SET agent_id = excluded.agent_id, dim = excluded.dim, "
                "vector = excluded.vector, norm = excluded.norm, create_time = excluded.create_time",
                [(v.key, model, v.agent_id, v.dim, v.vector, v.norm, now, v.key, v.text) for v in vectors])

    async def has_vectors(self, agent_id: int, model: str) -> bool:
        row = await self._db.fetchone(
            "SELECT 1 FROM mate_embedding WHERE agent_id = ? AND model = ? AND dim > 0 LIMIT 1", (agent_id, model))
        return row is not None

    async def vectors(self, agent_id: int, model: str, dim: int, source: str) -> list[tuple[int, bytes, float]]:
        """(key, vector, norm) of one agent's rows of one model: never another agent's."""
        parity = ""
        if source in _SOURCE_PARITY:
            parity = f" AND key % 2 = {_SOURCE_PARITY[source]}"
        rows = await self._db.fetchall(
            f"SELECT key, vector, norm FROM mate_embedding WHERE agent_id = ? AND model = ? AND dim = ?{parity}",
            (agent_id, model, dim))
        return [(int(r[0]), bytes(r[1]), float(r[2])) for r in rows]

    async def hits(self, agent_id: int, keys: Sequence[int]) -> list[SearchHit]:
        """The index rows `keys` as search hits, in the order of `keys`; only the agent's own."""
        if not keys:
            return []
        marks = ", ".join("?" for _ in keys)
        rows = await self._db.fetchall(
            f"SELECT {self._key}, source, body, time, conversation_id, ref_id, filename FROM {self._index} "
            f"WHERE {self._key} IN ({marks}) AND agent_id = ?", (*keys, agent_id))
        found = {int(row[0]): hit_of(row) for row in rows}
        return [found[key] for key in keys if key in found]

