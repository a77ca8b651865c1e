"""Daily notes stay cheap: an entry is added to the note in SQL and only the entry is indexed
(mate_file_piece); any other change indexes the file whole again, and search finds both."""

from __future__ import annotations

from pathlib import Path

from bot.app import Core
from bot.storage.embeddings import SqliteEmbeddingRepository
from memory.embeddings import EmbeddingBackfill, EndpointHealth, OpenAIEmbeddingClient
from memory.recall import MemorySearchService
from tests.fakes.embeddings import FakeEmbeddings
from tests.test_embeddings import KEY, config_with, vector_keys
from tests.test_memory_extraction import CONVERSATION, add_messages, chat, memory_env, memory_reply

NOTE = "memory/2026-04-01.md"
MORNING = "# 2026-04-01\n\n" + "".join(f"- morning {n}: a busy walk by the harbour\n" for n in range(400))


async def index_rows(core: Core, file_id: int) -> list[tuple[int, str]]:
    """(key, text) of a file's rows in the search index, oldest first."""
    rows = await core.db.fetchall("SELECT rowid, body FROM mate_search_trigram WHERE source = 'notes' AND ref_id = ? "
                                  "ORDER BY rowid", (file_id,))
    return [(int(r[0]), str(r[1])) for r in rows]


async def found(core: Core, query: str) -> list[str]:
    result = await MemorySearchService(core.repos.search).search(1, query, source="notes")
    return [r["snippet"] for r in result["results"] if r["filename"] == NOTE]


async def test_an_extracted_entry_is_appended_in_sql_and_indexed_alone(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        core = env.core
        await core.workspace.write(1, NOTE, MORNING)
        note = await core.workspace.get(1, NOTE)
        assert note is not None and len(note.content) > 15_000
        before = await index_rows(core, note.id)
        statements: list[str] = []
        await core.db.writer.set_trace_callback(statements.append)
        await add_messages(core, chat(2))
        env.fake.reply_text(memory_reply(daily="- lunch with Ann at the pier"))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        await core.db.writer.set_trace_callback(None)
        after = await core.workspace.get(1, NOTE)
        rows = await index_rows(core, note.id)
        versions = await core.db.fetchall("SELECT version, content, change, run_id FROM mate_workspace_file_history "
                                          "WHERE file_id = ? ORDER BY version", (note.id,))
        lunch, harbour = await found(core, "lunch at the pier"), await found(core, "busy walk harbour")

    assert outcome.files == (NOTE,)
    assert after is not None and after.content == MORNING + "\n- lunch with Ann at the pier\n"
    assert after.file_size == len(after.content.encode("utf-8"))
    # The note's text went into no statement: the entry alone was added, in SQL.
    written = [s for s in statements if "pier" in s]
    assert written and not [s for s in statements if "busy walk" in s], written
    # The note's old row is left as it was; the entry is a row of its own.
    assert rows == [*before, (rows[-1][0], "\n- lunch with Ann at the pier\n")] and len(before) == 1
    assert lunch == ["- lunch with Ann at the pier"] and harbour and "harbour" in harbour[0]
    # History still keeps each version whole, the new one as the extraction run's.
    assert [(v[0], v[2]) for v in versions] == [(1, "api"), (2, "extraction")]
    assert versions[1][1] == after.content and versions[1][3] is not None


async def test_any_other_change_indexes_the_file_whole_again(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        core = env.core
        await core.workspace.write(1, NOTE, "# 2026-04-01\n\n- tea with Bo\n")
        await core.workspace.append(1, NOTE, "- a kayak lesson")
        await core.workspace.append(1, NOTE, "- a violin lesson")
        note = await core.workspace.get(1, NOTE)
        assert note is not None
        pieces = await index_rows(core, note.id)
        kayak = await found(core, "kayak")
        await core.workspace.write(1, NOTE, "# 2026-04-01\n\n- tea with Bo\n- a violin lesson\n")
        rewritten = await index_rows(core, note.id)
        gone, violin = await found(core, "kayak"), await found(core, "violin")
        await core.workspace.delete(1, NOTE)
        deleted = await index_rows(core, note.id)
        orphans = await core.db.fetchall("SELECT key FROM mate_search_scope WHERE key % 2 = 1 AND key NOT IN "
                                         "(SELECT rowid FROM mate_search_trigram)")

    assert note.content == "# 2026-04-01\n\n- tea with Bo\n\n- a kayak lesson\n\n- a violin lesson\n"
    assert [text for _, text in pieces] == ["# 2026-04-01\n\n- tea with Bo\n", "\n- a kayak lesson\n",
                                            "\n- a violin lesson\n"]
    assert kayak == ["- a kayak lesson"]
    assert [text for _, text in rewritten] == ["# 2026-04-01\n\n- tea with Bo\n- a violin lesson\n"]
    assert gone == [] and violin == ["# 2026-04-01 - tea with Bo - a violin lesson"]
    assert deleted == [] and orphans == []


async def test_an_entry_at_the_end_of_a_long_note_gets_a_vector_of_its_own(tmp_path: Path) -> None:
    from bot.runtime import open_runtime

    async with FakeEmbeddings(api_key=KEY) as fake:
        config = config_with(tmp_path, fake)
        async with open_runtime(config, with_memory_worker=False) as rt, \
                OpenAIEmbeddingClient(config.mate.memory.embeddings) as client:
            await rt.core.workspace.write(1, NOTE, MORNING)
            await rt.core.workspace.append(1, NOTE, "- bought a red canoe")
            store = SqliteEmbeddingRepository(rt.core.db)
            await EmbeddingBackfill(client, store, EndpointHealth(fake.base_url)).fill()
            note = await rt.core.workspace.get(1, NOTE)
            assert note is not None
            keys = await vector_keys(rt, 1)
            rows = await index_rows(rt.core, note.id)
    assert [text for _, text in rows][1:] == ["\n- bought a red canoe\n"]
    assert {key for key, _ in rows} <= keys  # the note's start and its last entry, each with a vector
    assert "\n- bought a red canoe\n" in fake.texts()
