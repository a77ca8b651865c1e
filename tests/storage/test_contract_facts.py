"""Facts linked to the messages they came from are found with them: on SQLite and on PostgreSQL (`sql`)."""

from __future__ import annotations

from bot.storage import Repositories
from bot.storage.facts import FactLink
from bot.storage.memory_commit import ExtractionCommit, FileWrite
from bot.storage.sql import SqlDatabase
from memory.recall.search import MemorySearchService

SUPPORT_GROUP = "[Caroline] I went to a LGBTQ support group yesterday, it was so powerful"
FACT = "Caroline attended an LGBTQ support group on 7 May 2023 and found the transgender stories inspiring"


async def _group(sql: SqlDatabase) -> tuple[Repositories, list[int]]:
    repos = Repositories.over(sql)
    await repos.agents.ensure(1, "Mate")
    await repos.conversations.create("tg:-1", agent_id=1, channel="telegram", chat_key="tg:-1",
                                     trigger_source="channel")
    ids = [await repos.messages.add("tg:-1", "user", text, 5) for text in (
        "[Melanie] how was your week?", SUPPORT_GROUP, "[Melanie] that sounds wonderful",
        "[Melanie] my kids and I went camping by the lake")]
    return repos, ids


async def _found(repos: Repositories, query: str) -> list[int]:
    result = await MemorySearchService(repos.search).search(1, query, source="conversations")
    return [r["messageId"] for r in result["results"]]


async def test_a_message_is_found_by_the_words_of_the_facts_taken_from_it(sql: SqlDatabase) -> None:
    repos, ids = await _group(sql)
    assert await _found(repos, "transgender stories inspiring") == []
    await repos.memory_commits.commit(ExtractionCommit(
        1, "tg:-1", [FileWrite("memory/2023-05-08.md", f"# 2023-05-08\n\n- {FACT}\n", 0)], ids[-1],
        await repos.memory_runs.start(1, "extraction", "tg:-1"), "completed", "", facts=[FactLink(ids[1], FACT)]))
    assert await repos.facts.of(ids[1]) == [FACT]
    assert (await _found(repos, "transgender stories inspiring"))[0] == ids[1]


async def test_undoing_an_extraction_takes_its_facts_back(sql: SqlDatabase) -> None:
    repos, ids = await _group(sql)
    run = await repos.memory_runs.start(1, "extraction", "tg:-1")
    await repos.memory_commits.commit(ExtractionCommit(
        1, "tg:-1", [FileWrite("memory/2023-05-08.md", f"# 2023-05-08\n\n- {FACT}\n", 0)], ids[-1], run,
        "completed", "", facts=[FactLink(ids[1], FACT)]))
    await repos.facts.link([FactLink(ids[3], "Melanie camps by the lake with her kids")], run + 1000)  # another run's
    await repos.file_history.undo(run, await repos.file_history.run_changes(run), keep=50)
    assert await repos.facts.of(ids[1]) == [] and await repos.facts.of(ids[3]) != []
    assert await _found(repos, "transgender inspiring") == []


async def test_facts_stay_when_a_neighbour_changes_and_go_with_their_message(sql: SqlDatabase) -> None:
    repos, ids = await _group(sql)
    await repos.facts.link([FactLink(ids[1], FACT), FactLink(ids[3], "Melanie camps by the lake with her kids")])
    # The message before it is deleted: its "turn before" is indexed again, and keeps the facts.
    await sql.execute("DELETE FROM mate_message WHERE id = ?", (ids[0],))
    assert (await _found(repos, "transgender inspiring"))[0] == ids[1]
    await sql.execute("DELETE FROM mate_message WHERE id = ?", (ids[1],))
    assert await repos.facts.of(ids[1]) == []
    assert await _found(repos, "transgender inspiring") == []
    assert (await _found(repos, "camps"))[0] == ids[3]


async def test_a_fact_for_a_message_deleted_meanwhile_is_dropped_and_the_rest_kept(sql: SqlDatabase) -> None:
    repos, ids = await _group(sql)
    await sql.execute("DELETE FROM mate_message WHERE id = ?", (ids[1],))  # an incognito purge, say
    await repos.facts.link([FactLink(ids[1], FACT), FactLink(ids[3], "Melanie camps by the lake with her kids")])
    assert await repos.facts.of(ids[1]) == [] and await repos.facts.of(ids[3]) != []
    assert await _found(repos, "transgender inspiring") == []
