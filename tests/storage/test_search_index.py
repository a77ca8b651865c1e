"""bot/storage/search_index.py: the search tables merged into one segment each, every result as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app.core import Core, open_core
from bot.storage.bulk_load import NewConversation, NewMessage, SqliteBulkLoader
from bot.storage.search_index import SEARCH_TABLES
from memory.recall.search import MemorySearchService
from tests.support.config import make_config
from tests.support.recall_env import talk
from tests.support.recall_env import STAMP, segments

pytestmark = pytest.mark.sqlite_only  # FTS5's segments: PostgreSQL keeps its indexes itself


async def results(core: Core, *queries: str) -> list[object]:
    search = MemorySearchService(core.repos.search)
    return [await search.search(1, query) for query in queries]


async def test_merging_leaves_one_segment_per_table_and_every_result_as_it_was(tmp_path: Path) -> None:
    async with open_core(make_config(tmp_path)) as core:
        for day in range(12):  # each message its own transaction: its own segment
            await talk(core, f"console:{day}", 1, f"The canoe trip on day {day} went well.", "Nice canoe.",
                       f"我们第{day}天去划船。", "penicillin again")
        queries = ("canoe trip", "划船", "penicil", "what happened on day 7?")
        before = await results(core, *queries)
        assert all(count > 1 for count in (await segments(core)).values())
        await core.repos.search_index.merge()
        assert await segments(core) == {table: 1 for table in SEARCH_TABLES}
        assert await results(core, *queries) == before
        await core.repos.search_index.merge()  # once merged, nothing to do
        assert await segments(core) == {table: 1 for table in SEARCH_TABLES}


async def test_a_bulk_load_ends_with_a_merged_index(tmp_path: Path) -> None:
    async with open_core(make_config(tmp_path)):
        pass
    with SqliteBulkLoader(tmp_path / "mate.db") as load:
        load.conversations([NewConversation("console:me", 1, "console", "console:me", STAMP)])
        load.messages([NewMessage("console:me", "user", f"note {n}: the kettle is {'hot ' * n}", STAMP)
                       for n in range(3000)])
    async with open_core(make_config(tmp_path)) as core:
        assert await segments(core) == {table: 1 for table in SEARCH_TABLES}
        assert (await results(core, "kettle"))[0]["count"] == 5  # type: ignore[index]
