"""Daily notes stay cheap: an entry is added to the note in SQL and only the entry is indexed
(mate_file_piece); any other change indexes the file whole again, and search finds both."""

from __future__ import annotations

from pathlib import Path

from bot.app.core import Core
from bot.storage.embeddings import EmbeddingRepository
from memory.recall.embeddings import EmbeddingBackfill, EndpointHealth, OpenAIEmbeddingClient
from memory.recall.search import MemorySearchService
from tests.support.fakes.embeddings import FakeEmbeddings
from tests.support.embeddings_env import KEY, config_with, vector_keys
from tests.support.memory_env import CONVERSATION, add_messages, chat, memory_env, memory_reply

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
    from bot.app.runtime import open_runtime

    async with FakeEmbeddings(api_key=KEY) as fake:
        config = config_with(tmp_path, fake)
        async with open_runtime(config, with_memory_worker=False) as rt, \
                OpenAIEmbeddingClient(config.mate.memory.embeddings) as client:
            await rt.core.workspace.write(1, NOTE, MORNING)
            await rt.core.workspace.append(1, NOTE, "- bought a red canoe")
            store = EmbeddingRepository(rt.core.db)
            await EmbeddingBackfill(client, store, EndpointHealth(fake.base_url)).fill()
            note = await rt.core.workspace.get(1, NOTE)
            assert note is not None
            keys = await vector_keys(rt, 1)
            rows = await index_rows(rt.core, note.id)
    assert [text for _, text in rows][1:] == ["\n- bought a red canoe\n"]
    assert {key for key, _ in rows} <= keys  # the note's start and its last entry, each with a vector
    assert "\n- bought a red canoe\n" in fake.texts()


async def test_text_with_a_nul_or_in_any_script_is_indexed_whole_and_appended_alone(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        core = env.core
        await core.workspace.write(1, "NUL.md", "abc\x00def zebra\n")  # the API and the memory tool take it
        await core.workspace.append(1, "NUL.md", "- giraffe")
        await core.workspace.write(1, NOTE, "# 2026-04-01\n\n- 和小王见面 👩‍👩‍👧\n")
        await core.workspace.append(1, NOTE, "- 🎉 庆祝生日 café")
        nul, note = await core.workspace.get(1, "NUL.md"), await core.workspace.get(1, NOTE)
        assert nul is not None and note is not None
        nul_rows, note_rows = await index_rows(core, nul.id), await index_rows(core, note.id)
        search = MemorySearchService(core.repos.search)
        zebra = (await search.search(1, "zebra", source="notes"))["results"]
        giraffe = (await search.search(1, "giraffe", source="notes"))["results"]
        birthday = await found(core, "庆祝")

    assert [text for _, text in nul_rows] == ["abc\x00def zebra\n", "\n- giraffe\n"]
    assert [r["filename"] for r in zebra] == ["NUL.md"] and [r["filename"] for r in giraffe] == ["NUL.md"]
    assert [text for _, text in note_rows] == ["# 2026-04-01\n\n- 和小王见面 👩‍👩‍👧\n", "\n- 🎉 庆祝生日 café\n"]
    assert "".join(text for _, text in note_rows) == note.content
    assert birthday == ["- 🎉 庆祝生日 café"]


async def test_an_index_from_before_pieces_is_made_again_in_pieces(tmp_path: Path) -> None:
    """A database as version 13 left it: each file one row under its file id * 2 + 1, with a vector."""
    import sqlite3
    from contextlib import closing

    from bot.storage.migrations import MIGRATIONS
    from bot.storage.search_schema import FILE_TEXT, FILE_TRIGRAM, SEARCH_SCOPE

    async with memory_env(tmp_path) as env:
        await env.core.workspace.write(1, NOTE, MORNING)
        path = env.core.config.mate.database.path
    old_triggers = [s for v, _, statements in MIGRATIONS if v == 9 for s in statements if "tr_embedding_file" in s]
    with closing(sqlite3.connect(path)) as conn:
        from bot.storage.search_text import FUNCTION_NAME, spaced

        conn.create_function(FUNCTION_NAME, 1, spaced, deterministic=True)
        pieces = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'tr_piece_%'"
        for (name,) in conn.execute(pieces).fetchall():
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TABLE mate_file_piece")
        for table in ("mate_search_text", "mate_search_trigram"):
            conn.execute(f"DELETE FROM {table} WHERE rowid % 2 = 1")
        conn.execute("DELETE FROM mate_search_scope WHERE key % 2 = 1")
        conn.execute(f"{FILE_TEXT.format(r='f')} FROM mate_workspace_file f WHERE f.deleted = 0")
        conn.execute(f"{FILE_TRIGRAM.format(r='f')} FROM mate_workspace_file f WHERE f.deleted = 0")
        conn.execute("INSERT INTO mate_search_scope(key, agent_id) SELECT id * 2 + 1, agent_id "
                     "FROM mate_workspace_file WHERE deleted = 0")
        for statement in [*old_triggers, *(s for s in SEARCH_SCOPE if "tr_search_scope_file" in s)]:
            conn.execute(statement)
        conn.execute("INSERT INTO mate_embedding(key, model, agent_id, dim, vector, norm, create_time) "
                     "SELECT id * 2 + 1, 'm', agent_id, 1, x'80', 1.0, '' FROM mate_workspace_file")
        [live] = conn.execute("SELECT COUNT(*) FROM mate_workspace_file WHERE deleted = 0 AND content <> ''").fetchone()
        conn.execute("DELETE FROM schema_version WHERE version >= 14")
        conn.commit()
    async with memory_env(tmp_path) as env:
        core = env.core
        stale = await core.db.fetchall("SELECT rowid FROM mate_search_trigram WHERE rowid % 2 = 1 "
                                       "AND rowid NOT IN (SELECT id * 2 + 1 FROM mate_file_piece)")
        pieces = await core.db.fetchall("SELECT file_id, COUNT(*) FROM mate_file_piece GROUP BY file_id")
        vectors = await core.db.fetchall("SELECT key FROM mate_embedding WHERE key % 2 = 1")
        triggers = await core.db.fetchall("SELECT name FROM sqlite_master WHERE type = 'trigger' AND "
                                          "(name LIKE 'tr_search_file_%' OR name LIKE 'tr_search_scope_file_%' "
                                          "OR name LIKE 'tr_embedding_file_%')")
        harbour = await found(core, "busy walk harbour")
    assert stale == [] and vectors == [] and triggers == []
    assert len(pieces) == live and all(count == 1 for _, count in pieces)
    assert harbour and "harbour" in harbour[0]
