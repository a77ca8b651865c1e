"""Conversations written straight into storage for the search and recall tests."""

from __future__ import annotations

from bot.app.core import Core
from bot.storage.search_index import SEARCH_TABLES


async def talk(core: Core, conversation: str, agent_id: int, *texts: str) -> list[int]:
    await core.repos.conversations.create(conversation, agent_id=agent_id, channel="console",
                                          chat_key=conversation, trigger_source="console")
    ids = []
    for index, text in enumerate(texts):
        ids.append(await core.repos.messages.add(conversation, "user" if index % 2 == 0 else "assistant", text, 5))
    return ids


CHATTER = ("The weather was nice today.", "Sounds lovely, did you go out?", "I watched a film about trains.",
           "Which one was it?", "My sister Hannah moved to Lisbon in March.", "That is a big change for her!",
           "Coffee tastes better in the morning.", "Agreed, especially with milk.")


STAMP = "2026-08-01 09:00:00"


async def segments(core: Core) -> dict[str, int]:
    """Segments per search table: an FTS5 data row's id holds its segment's id above bit 37
    (ids up to 10 are the table's own records)."""
    counts = {}
    for table in SEARCH_TABLES:
        row = await core.db.fetchone(f"SELECT COUNT(DISTINCT id >> 37) FROM {table}_data WHERE id > 10")
        counts[table] = int(row[0]) if row else -1
    return counts
