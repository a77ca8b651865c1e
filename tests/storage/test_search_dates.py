"""Dates in a search: the rows of a date a query names rank up among those with its words,
and cost no more than those rows (SPEC S26)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TypeVar

import pytest

from bot.app.core import Core, open_core
from bot.storage.database import Database
from bot.storage.search import SqliteSearchRepository
from bot.storage.search_text import query_dates
from memory.recall.search import MemorySearchService
from tests.support.config import make_config, pinned_clock
from tests.support.recall_env import CHATTER, talk

T = TypeVar("T")

# 7 May 2023 was a Sunday, 19 August 2023 a Saturday, 2 May 2023 a Tuesday.
SUNDAY, SATURDAY, TUESDAY = "2023-05-07 10:00:00", "2023-08-19 10:00:00", "2023-05-02 10:00:00"


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    async with open_core(make_config(tmp_path, agents=[{"id": 1, "name": "Mate"}]), clock=pinned_clock()) as opened:
        await opened.agents.ensure_configured()
        await talk(opened, "console:me", 1, *CHATTER)
        yield opened


async def said(core: Core, *lines: tuple[str, str]) -> None:
    """User messages (time, text) in console:me, into the daemon's schema (its triggers index them)."""
    async with core.db.transaction() as conn:
        await conn.executemany("INSERT INTO mate_message(conversation_id, role, content, token_count, create_time) "
                               "VALUES ('console:me', 'user', ?, 5, ?)", [(text, when) for when, text in lines])


async def snippets(core: Core, query: str) -> list[str]:
    return [r["snippet"] for r in (await MemorySearchService(core.repos.search).search(1, query))["results"]]


async def test_the_dates_of_a_query_as_the_index_writes_them() -> None:
    cases = {
        "what did we do on 7 May 2023?": ["7 may 2023"],
        "8th of December": ["8 december"], "December 1,2023": ["1 december 2023"],
        "Aug 5th": ["5 august"], "in May 2023": ["may 2023"], "2023-05-07": ["7 may 2023"],
        "kids on Sundays": ["sunday"], "in 2022": ["2022"],
        "2023年5月7日": ["7 may 2023"], "十二月": ["december"], "周二的课": ["tuesday"], "星期天": ["sunday"],
        # Numbers are dates only beside a month; a month's number must be one.
        "the 3 kids": [], "45 may": ["may"], "13月": [], "我的护照哪个月到期": [], "房租每月几号交": [],
    }
    assert {query: query_dates(query).phrases for query in cases} == cases
    assert query_dates("kids on 7 May 2023").rest.split() == ["kids", "on"]


async def test_a_date_ranks_up_the_rows_of_that_day(core: Core) -> None:
    await said(core, (SUNDAY, "We went hiking with the kids."), (SATURDAY, "We went swimming with the kids."))
    for query in ("kids on 7 May 2023", "what did the kids do on the 7th of May?", "kids 2023-05-07",
                  "孩子们 2023年5月7日 kids", "kids on Sunday", "周日 kids", "kids in May"):
        assert "hiking" in (await snippets(core, query))[0], query
    # Without a date the newer one comes first (a tie).
    assert "swimming" in (await snippets(core, "what did the kids do?"))[0]


async def test_a_number_that_is_no_date_ranks_no_day_up(core: Core) -> None:
    # Written on the 3rd and the 19th: "3" in the query is a count, not the 3rd.
    await said(core, ("2023-05-03 10:00:00", "The apples are on sale."), (SATURDAY, "The apples are on sale again."))
    assert "again" in (await snippets(core, "3 apples"))[0]


async def test_a_query_of_dates_alone_finds_the_rows_of_those_dates(core: Core) -> None:
    await said(core, (SUNDAY, "We went hiking with the kids."), (SATURDAY, "We went swimming with the kids."))
    for query in ("May 2023", "7 May 2023", "2023年5月", "2023-05-07"):
        assert any("hiking" in s for s in await snippets(core, query)), query
        assert not any("swimming" in s for s in await snippets(core, query)), query


class SteppedDatabase(Database):
    """The daemon's database, its reads run on one connection that counts the SQLite virtual
    machine's steps: how much work a search is, in a number a busy machine does not change
    (a time would)."""

    steps = 0

    def step(self) -> int:
        self.steps += 1
        return 0  # go on

    async def read_together(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def counted(conn: sqlite3.Connection) -> T:
            conn.set_progress_handler(self.step, 10)
            try:
                return work(conn)
            finally:
                conn.set_progress_handler(None, 10)

        return await super().read_together(counted)


async def test_rows_of_a_named_date_without_the_words_cost_nothing(tmp_path: Path) -> None:
    # Before: "Tuesdays" matched the date of every row written on a Tuesday, and each of them
    # was ranked (a seventh of a big index: 25 ms more a search at 100 000 messages).
    config = make_config(tmp_path)
    async with open_core(config, clock=pinned_clock()) as core:
        await core.agents.ensure_configured()
        await talk(core, "console:me", 1, *CHATTER)
        await said(core, *[(TUESDAY, f"The weather is fine, day {n}.") for n in range(2000)])
        await said(core, (TUESDAY, "I have a guitar lesson after work."), (SATURDAY, "The guitar needs new strings."))
    db = SteppedDatabase(config.mate.database.path, clock=pinned_clock())
    async with db:
        service = MemorySearchService(SqliteSearchRepository(db))
        work = {}
        for query in ("guitar lesson", "guitar lesson on Tuesdays"):
            db.steps = 0
            result = await service.search(1, query)
            work[query] = db.steps
            assert [r["snippet"] for r in result["results"]][0] == "I have a guitar lesson after work."
            assert all("guitar" in r["snippet"] for r in result["results"]), query

    assert work["guitar lesson on Tuesdays"] < 3 * work["guitar lesson"], work


async def test_dates_named_relative_to_today_as_the_index_writes_them() -> None:
    monday = date(2026, 12, 7)
    cases = {
        "what did I say yesterday?": ["6 december 2026"], "the day before yesterday": ["5 december 2026"],
        "3 days ago": ["4 december 2026"], "a year ago": ["2025"], "last Friday": ["4 december 2026"],
        "last Monday": ["30 november 2026"], "this month": ["december 2026"], "last month": ["november 2026"],
        "last year": ["2025"], "today": ["7 december 2026"],
        "last week": [f"{d} {'november' if d > 7 else 'december'} 2026" for d in (30, 1, 2, 3, 4, 5, 6)],
        "我昨天说了什么": ["6 december 2026"], "前天": ["5 december 2026"], "三天前": ["4 december 2026"],
        "上周五吃了什么": ["4 december 2026"], "上个月": ["november 2026"], "去年的旅行": ["2025"],
        "this Friday": ["11 december 2026"], "last weekend": ["5 december 2026", "6 december 2026"],
        "the past month": ["december 2026", "november 2026"], "day before yesterday": ["5 december 2026"],
        "十五天前": ["22 november 2026"], "两天前": ["5 december 2026"], "本周三": ["9 december 2026"],
        "上周末": ["5 december 2026", "6 december 2026"],
        # A count far back is no date anyone means; a number alone is none; 一起 and 周围 are no days.
        "500 days ago": [], "the 3 kids": [], "这周围有什么餐厅": [], "二十年前": [],
        "上周一起吃饭": [f"{d} {'november' if d > 7 else 'december'} 2026" for d in (30, 1, 2, 3, 4, 5, 6)],
    }
    assert {query: query_dates(query, monday).phrases for query in cases} == cases
    assert query_dates("yesterday").phrases == []  # without today, nothing relative is read
    assert query_dates("cake recipe from yesterday", monday).rest.split() == ["cake", "recipe", "from"]
    assert query_dates("13 months ago", monday).rest.split() == ["13", "months", "ago"]  # kept as words
    assert "一起吃饭" in query_dates("上周一起吃饭", monday).rest
    # January looks back into the year before.
    assert query_dates("last month", date(2027, 1, 15)).phrases == ["december 2026"]


async def test_yesterday_and_last_week_find_the_rows_of_those_days(tmp_path: Path) -> None:
    today = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)  # a Monday
    async with open_core(make_config(tmp_path, agents=[{"id": 1, "name": "Mate"}]),
                         clock=pinned_clock(today)) as core:
        await core.agents.ensure_configured()
        await talk(core, "console:me", 1, *CHATTER)  # today's
        await said(core, ("2026-12-06 09:00:00", "Dinner was a mushroom risotto."),
                   ("2026-12-02 09:00:00", "Dinner was a lentil soup."),
                   ("2026-11-20 09:00:00", "Dinner was a pumpkin curry."))
        service = MemorySearchService(core.repos.search, clock=pinned_clock(today))

        async def found(query: str) -> list[str]:
            return [r["snippet"] for r in (await service.search(1, query))["results"]]

        assert "risotto" in (await found("what was dinner yesterday?"))[0]
        assert "lentil" in (await found("dinner last Wednesday"))[0]
        assert "pumpkin" in (await found("上个月的晚饭 dinner"))[0]
        # Late on 6 December in UTC is already the 7th in Shanghai: its "yesterday" is the 6th (in
        # UTC, the 5th, when nothing was said).
        evening = datetime(2026, 12, 6, 20, 0, tzinfo=timezone.utc)
        for zone, expected in (("Asia/Shanghai", ["risotto."]), ("UTC", [])):
            elsewhere = MemorySearchService(core.repos.search, clock=pinned_clock(evening), timezone=zone)
            said_then = (await elsewhere.search(1, "what did I say yesterday?"))["results"]
            assert [r["snippet"].split()[-1] for r in said_then] == expected, zone
        last_week = await found("what did I say last week?")  # dates alone: that week's rows, Monday to Sunday
        assert sorted(s.split()[-1] for s in last_week) == ["risotto.", "soup."]
