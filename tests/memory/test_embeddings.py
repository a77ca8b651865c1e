"""Semantic search through an OpenAI-compatible embeddings endpoint: config, backfill, fusion, isolation."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.core.config import masked_dump, parse_config
from bot.core.errors import ConfigError
from bot.app.runtime import Runtime, open_runtime
from bot.storage.embeddings import EmbeddingRepository
from channels.base import InboundMessage
from memory.recall.embeddings import EmbeddingBackfill, EndpointHealth, OpenAIEmbeddingClient, api_root
from memory.recall.search import MemorySearchService
from tests.support.eventually import eventually
from tests.support.fakes.embeddings import FakeEmbeddings
from tests.support.embeddings_env import KEY, config_with, vector_keys

WAIT = 60.0  # bound of every wait for a condition: generous for a loaded 2-core machine
PHOTOS = "[Ann] I took lots of photographs at the lake last weekend"
FILLER = [f"[Bob] message number {n} about the weather, lunch and the traffic" for n in range(30)]


@asynccontextmanager
async def runtime(tmp_path: Path, fake: FakeEmbeddings, **kwargs: Any) -> AsyncIterator[Runtime]:
    async with open_runtime(config_with(tmp_path, fake, **kwargs)) as rt:
        yield rt


async def group_talk(rt: Runtime, chat: str, agent_id: int, *texts: str) -> list[int]:
    """Group messages stored as the router stores them (one user turn each)."""
    repos = rt.core.repos
    await repos.conversations.create(chat, agent_id=agent_id, channel="telegram", chat_key=chat,
                                     trigger_source="channel")
    return [await repos.messages.add(chat, "user", text, 5) for text in texts]


# --- configuration -------------------------------------------------------------------------------


def test_embeddings_are_off_unless_configured_and_take_their_key_from_the_environment() -> None:
    assert parse_config({"mate": {}}, environ={}).mate.memory.embeddings is None
    loaded = parse_config({"mate": {"memory": {"embeddings": {
        "base-url": "http://127.0.0.1:8080/v1", "model": "nomic-embed-text", "api-key": "${EMB_KEY}"}}}},
        environ={"EMB_KEY": KEY})
    settings = loaded.mate.memory.embeddings
    assert settings is not None and (settings.base_url, settings.model, settings.api_key) == (
        "http://127.0.0.1:8080/v1", "nomic-embed-text", KEY)
    assert KEY not in str(masked_dump(loaded))
    assert masked_dump(loaded)["mate"]["memory"]["embeddings"]["api-key"] == "***"


@pytest.mark.parametrize(("embeddings", "expected"), [
    ({"base-url": "http://x:1/v1", "model": "m", "apikey": "k"}, "mate.memory.embeddings.apikey: unknown key"),
    ({"model": "m"}, "mate.memory.embeddings.base-url: Field required"),
    ({"base-url": "http://x:1/v1"}, "mate.memory.embeddings.model: Field required"),
    ({"base-url": "http://x:1/v1", "model": "  "}, "mate.memory.embeddings.model: must name the embedding model"),
    ({"base-url": "ftp://x/v1", "model": "m"}, "mate.memory.embeddings.base-url: must be an http:// or https://"),
    ({"base-url": "http://x:99999/v1", "model": "m"}, "mate.memory.embeddings.base-url: must be an http://"),
    ("yes", "mate.memory.embeddings:"),
])
def test_a_bad_embeddings_setting_is_one_line_naming_the_key(embeddings: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"mate": {"memory": {"embeddings": embeddings}}}, environ={})
    assert str(caught.value).startswith(expected) and "\n" not in str(caught.value)


def test_an_address_without_a_path_gets_v1() -> None:
    assert api_root("http://127.0.0.1:8080") == "http://127.0.0.1:8080/v1"
    assert api_root("http://127.0.0.1:8080/") == "http://127.0.0.1:8080/v1"
    assert api_root("https://api.example.com/openai/v1/") == "https://api.example.com/openai/v1"


# --- backfill ------------------------------------------------------------------------------------


async def test_new_messages_and_files_get_vectors_in_the_background(tmp_path: Path) -> None:
    async with FakeEmbeddings(api_key=KEY) as fake, runtime(tmp_path, fake) as rt:
        files = {key for f in await rt.core.workspace.list(1) if f.content.strip()
                 for key in await piece_keys(rt, f.id)}
        await eventually(lambda: _all_of(rt, files, "ngram-1"), "the seeded files' vectors")
        reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", PHOTOS))
        assert reply is not None and not reply.failure
        [hit] = (await MemorySearchService(rt.core.repos.search).search(1, "photographs lake", limit=1))["results"]
        await eventually(lambda: _has(rt, 1, hit["messageId"] * 2), "the new message's vector")
        await rt.core.workspace.write(1, "MEMORY.md", "# Core memory\n- Ann's camera is a Leica")
        memory = await rt.core.workspace.get(1, "MEMORY.md")
        assert memory is not None
        await eventually(lambda: "# Core memory\n- Ann's camera is a Leica" in fake.texts(), "the edited file embedded")
        [edited] = await piece_keys(rt, memory.id)
        await eventually(lambda: _has(rt, 1, edited), "the edited file's vector")
    assert files and PHOTOS in fake.texts()
    assert all(r.model == "ngram-1" and r.authorization == f"Bearer {KEY}" for r in fake.requests)


async def _has(rt: Runtime, agent_id: int, key: int) -> bool:
    return key in await vector_keys(rt, agent_id)


async def piece_keys(rt: Runtime, file_id: int) -> list[int]:
    """The search index keys of a workspace file's pieces (the file, and entries appended to it)."""
    rows = await rt.core.db.fetchall("SELECT id * 2 + 1 FROM mate_file_piece WHERE file_id = ? ORDER BY id",
                                     (file_id,))
    return [int(r[0]) for r in rows]


async def test_a_text_the_endpoint_refuses_is_skipped_and_the_rest_get_vectors(tmp_path: Path) -> None:
    async with FakeEmbeddings(api_key=KEY, refuse_containing="TOO LONG") as fake:
        settings = config_with(tmp_path, fake).mate.memory.embeddings
        async with open_runtime(config_with(tmp_path, fake), with_memory_worker=False) as rt, \
                OpenAIEmbeddingClient(settings) as client:
            ids = await group_talk(rt, "tg:-1", 1, "[Ann] hello there", "[Ann] TOO LONG " * 50, "[Bob] goodbye")
            backfill = EmbeddingBackfill(client, EmbeddingRepository(rt.core.db), EndpointHealth(fake.base_url))
            first = await backfill.fill()
            again = await backfill.fill()
            keys = await vector_keys(rt, 1)
    assert {ids[0] * 2, ids[2] * 2} <= keys and ids[1] * 2 not in keys
    assert first >= 3 and again == 0  # the refused text is not asked again


async def test_a_vector_of_a_text_changed_meanwhile_is_not_kept(tmp_path: Path) -> None:
    from bot.storage.embeddings import StoredVector

    async with FakeEmbeddings(api_key=KEY) as fake:
        async with open_runtime(config_with(tmp_path, fake), with_memory_worker=False) as rt:
            store = EmbeddingRepository(rt.core.db)
            [memory] = [p for p in await store.missing_files("ngram-1", 10) if p.text.startswith("# Core memory")]
            await rt.core.workspace.write(1, "MEMORY.md", "# Core memory\n- moved to Porto")  # while it was embedded
            stale = StoredVector(memory.key, 1, memory.text, 4, bytes([128, 200, 60, 128]), 1.0)
            await store.store("ngram-1", [stale])
            kept = await store.vectors(1, "ngram-1", 4, "all")
            [again] = [p for p in await store.missing_files("ngram-1", 10) if p.text.startswith("# Core memory")]
    # The rewritten file is a new piece, waiting for its vector; the old one's vector was not kept.
    assert kept == [] and again.text == "# Core memory\n- moved to Porto" and again.key != memory.key


# --- fusion --------------------------------------------------------------------------------------


def test_fusion_weighs_the_words_ranking_more_and_lifts_rows_both_hold() -> None:
    from bot.storage.search import SearchHit
    from memory.recall.search import RRF_K, SEMANTIC_WEIGHT, fused

    def hits(*keys: int) -> list[SearchHit]:
        return [SearchHit(key=k, source="notes", body="", time="") for k in keys]

    lexical, semantic = hits(1, 2, 3, 4), hits(9, 8, 3, 7)
    order = [hit.key for hit in fused([(1.0, lexical), (SEMANTIC_WEIGHT, semantic)])]
    assert (RRF_K, SEMANTIC_WEIGHT) == (10, 0.3)
    assert order[:4] == [3, 1, 2, 4]  # third in both: 1.3/13 beats the words' first, 1/11
    assert order[4:] == [9, 8, 7]  # rows only the vectors found come after the words' own here
    equal = [hit.key for hit in fused([(1.0, lexical), (1.0, semantic)], k=60)]
    assert equal[:3] == [3, 1, 9]  # the textbook fusion: the vectors' first beats the words' second


async def test_fusion_finds_a_paraphrase_the_words_miss(tmp_path: Path) -> None:
    async with FakeEmbeddings(api_key=KEY) as fake, runtime(tmp_path, fake) as rt:
        ids = await group_talk(rt, "tg:-1", 1, *FILLER[:15], PHOTOS, *FILLER[15:])
        await eventually(lambda: _all_of(rt, {i * 2 for i in ids}, "ngram-1"), "every message's vector")
        lexical = await MemorySearchService(rt.core.repos.search).search(1, "photography")
        fused = await rt.search.search(1, "photography")
        plain = await MemorySearchService(rt.core.repos.search).search(1, "weather lunch")
        both = await rt.search.search(1, "weather lunch")
    assert ids[15] not in [r["messageId"] for r in lexical["results"]]  # "photography" stems apart
    assert [r["messageId"] for r in fused["results"]][0] == ids[15]
    assert fused["count"] == len(fused["results"]) <= 5
    assert [set(r) for r in both["results"]] == [set(r) for r in plain["results"]]  # same shape, with context
    assert both["count"] == plain["count"] == 5


async def test_vectors_never_bring_another_agents_rows(tmp_path: Path) -> None:
    agents = [{"id": 1, "name": "Mate"}, {"id": 2, "name": "Other"}]
    async with FakeEmbeddings(api_key=KEY) as fake, runtime(tmp_path, fake, agents=agents) as rt:
        await rt.core.agents.ensure_configured()
        mine = await group_talk(rt, "tg:-1", 1, *FILLER[:10])
        theirs = await group_talk(rt, "tg:-2", 2, PHOTOS, "[Cy] photography is my hobby, photographs daily")
        await eventually(lambda: _all_of(rt, {m * 2 for m in mine}, "ngram-1"), "agent 1's vectors")
        await eventually(lambda: _all_of(rt, {m * 2 for m in theirs}, "ngram-1", agent_id=2), "agent 2's vectors")
        result = await rt.search.search(1, "photography photographs", limit=20)
        keys_of_1 = await vector_keys(rt, 1)
        notes = await rt.search.search(2, "photography", source="notes")
    found = {r.get("messageId") for r in result["results"]}
    assert not found & set(theirs) and found & set(mine)  # agent 1 gets its own rows only
    assert not keys_of_1 & {m * 2 for m in theirs}
    assert all(r["source"] == "notes" for r in notes["results"])


# --- the endpoint down, or changed ---------------------------------------------------------------


async def test_endpoint_down_search_stays_lexical_with_one_log_line(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with FakeEmbeddings(api_key=KEY) as fake, runtime(tmp_path, fake) as rt:
        ids = await group_talk(rt, "tg:-1", 1, *FILLER[:5], "[Ann] the wifi password hint is green owl")
        await eventually(lambda: _has(rt, 1, ids[-1] * 2), "the vectors")
        fake.fail_status = 503
        answered = len(fake.requests)
        await group_talk(rt, "tg:-2", 1, "[Ann] my locker number is 4411")
        await eventually(lambda: len(fake.requests) >= answered + 3, "the backfill to fail three times", timeout=WAIT)
        queries = ("wifi password", "locker", "owl")
        results = [await rt.search.search(1, query) for query in queries]
        lexical = [await MemorySearchService(rt.core.repos.search).search(1, query) for query in queries]
    assert results == lexical  # the words' ranking as it is, nothing missing
    assert "green owl" in results[0]["results"][0]["snippet"] and "4411" in results[1]["results"][0]["snippet"]
    lines = [r for r in caplog.records if r.name == "memory.recall.embeddings" and r.levelno >= logging.WARNING]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "search finds by words alone" in lines[0].getMessage() and "HTTP 503" in lines[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
    assert KEY not in caplog.text


async def test_a_search_does_not_wait_for_an_endpoint_that_never_answers(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    async with FakeEmbeddings(api_key=KEY) as fake, runtime(tmp_path, fake) as rt:
        ids = await group_talk(rt, "tg:-1", 1, "[Ann] the wifi password hint is green owl")
        await eventually(lambda: _has(rt, 1, ids[0] * 2), "the vector")
        fake.hang = True  # takes the request and never answers
        lexical = await MemorySearchService(rt.core.repos.search).search(1, "wifi password")
        result = await asyncio.wait_for(rt.search.search(1, "wifi password"), WAIT)
        again = await asyncio.wait_for(rt.search.search(1, "wifi password"), WAIT)
        fake.hang = False
    assert result == again == lexical
    lines = [r.getMessage() for r in caplog.records if r.name == "memory.recall.embeddings"]
    assert len(lines) == 1 and "no answer" in lines[0]


async def test_an_unreachable_endpoint_leaves_chat_and_search_working(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    fake = FakeEmbeddings(api_key=KEY)  # never started: nothing listens on its address
    from tests.support.daemon_process import free_port

    fake.port = free_port()
    async with runtime(tmp_path, fake) as rt:
        reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", "my bike lock code is 9921"))
        await eventually(lambda: any(r.name == "memory.recall.embeddings" for r in caplog.records), "the failure's log line")
        result = await rt.search.search(1, "bike lock")
    assert reply is not None and not reply.failure
    assert result["count"] >= 1 and "9921" in result["results"][0]["snippet"]
    lines = [r for r in caplog.records if r.name == "memory.recall.embeddings"]
    assert len(lines) == 1 and "unreachable" in lines[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)


async def test_another_model_makes_every_vector_again(tmp_path: Path) -> None:
    async with FakeEmbeddings(api_key=KEY) as fake:
        async with runtime(tmp_path, fake) as rt:
            ids = await group_talk(rt, "tg:-1", 1, PHOTOS, *FILLER[:3])
            await eventually(lambda: _has(rt, 1, ids[-1] * 2), "the first model's vectors")
            first = await vector_keys(rt, 1)
        async with runtime(tmp_path, fake, model="ngram-2") as rt:
            await eventually(lambda: _all_of(rt, first, "ngram-2"), "the second model's vectors")
            old = await vector_keys(rt, 1, "ngram-1")
            found = await rt.search.search(1, "photography")
    assert [r.model for r in fake.requests].count("ngram-2") >= 1
    assert PHOTOS in [t for r in fake.requests if r.model == "ngram-2" for t in r.inputs]
    assert old == set()  # the old model's vectors are gone, not mixed in
    assert ids[0] in [r.get("messageId") for r in found["results"]]


async def _all_of(rt: Runtime, keys: set[int], model: str, agent_id: int = 1) -> bool:
    return keys <= await vector_keys(rt, agent_id, model)


# --- the daemon ----------------------------------------------------------------------------------


async def test_the_daemon_finds_a_paraphrase_and_keeps_the_key_out_of_its_log(tmp_path: Path) -> None:
    from tests.support.daemon_process import clean_env, daemon, free_port

    port = free_port()
    config = tmp_path / "config.yaml"
    async with FakeEmbeddings(api_key=KEY) as fake:
        config.write_text(
            "mate:\n  timezone: UTC\n  memory:\n    auto-summarize-enabled: false\n    embeddings:\n"
            f"      base-url: {fake.base_url}\n      model: ngram-1\n      api-key: ${{EMB_KEY}}\n"
            f"  channels:\n    console:\n      enabled: false\n  api:\n    port: {port}\n", encoding="utf-8")
        async with daemon(config, port, env=clean_env(EMB_KEY=KEY)) as running, aiohttp.ClientSession() as http:
            async def say(text: str) -> None:
                async with http.post(f"{running.base}/api/v1/chat/1", headers=running.auth,
                                     json={"conversationId": "c1", "message": text}) as response:
                    assert response.status == 200

            async def found() -> bool:
                async with http.get(f"{running.base}/api/v1/memory/1/search", headers=running.auth,
                                    params={"q": "photography", "source": "conversations"}) as response:
                    body = await response.json()
                return any("photographs" in r["snippet"] for r in body["data"]["results"])

            await say("I took lots of photographs at the lake last weekend")
            await eventually(found, "the paraphrase to be found through the daemon's API")
            fake.fail_status = 503
            await say("my locker number is 4411")
            await eventually(lambda: running.logged("search finds by words alone"), "the failure's log line")
            async with http.get(f"{running.base}/api/v1/memory/1/search", headers=running.auth,
                                params={"q": "locker"}) as response:
                lexical = await response.json()
    assert "4411" in lexical["data"]["results"][0]["snippet"]
    assert KEY not in "\n".join(running.lines) and "Traceback" not in "\n".join(running.lines)
    assert sum("search finds by words alone" in line for line in running.lines) == 1


# --- the vector comparison -----------------------------------------------------------------------


@pytest.mark.parametrize("rows", [500, 3000])  # 3000: past PREFILTER_ABOVE, the sign prefilter runs
def test_quantized_vectors_rank_as_exact_cosine_does(rows: int) -> None:
    import math
    import random

    from memory.recall.embeddings import PREFILTER_ABOVE, nearest, quantize

    chance = random.Random(7)
    centres = [[chance.gauss(0, 1) for _ in range(96)] for _ in range(40)]
    vectors = [[x + chance.gauss(0, 0.6) for x in centres[n % 40]] for n in range(rows)]
    query = [x + chance.gauss(0, 0.6) for x in centres[3]]

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    exact = sorted(range(rows), key=lambda n: -cosine(query, vectors[n]))[:20]
    packed = [(n, *quantize(v)) for n, v in enumerate(vectors)]
    found = nearest(*quantize(query), packed, 20)
    assert (rows > PREFILTER_ABOVE) == (rows == 3000)
    assert len(set(exact) & {key for key, _ in found}) >= 18
    assert all(abs(score - cosine(query, vectors[key])) < 0.02 for key, score in found)


async def test_an_incognito_message_is_never_sent_to_the_endpoint(tmp_path: Path) -> None:
    async with FakeEmbeddings(api_key=KEY) as fake, runtime(tmp_path, fake) as rt:
        await group_talk(rt, "tg:-5", 1, "[Ann] the lake was lovely")
        assert await rt.core.repos.incognito.start("tg:-5")
        await group_talk(rt, "tg:-5", 1, "[Ann] my bank pin is 4321", "[Ann] and the dog is called Rex")
        await eventually(lambda: "[Ann] the lake was lovely" in fake.texts(), "the message before incognito embedded")
        pending = await EmbeddingRepository(rt.core.db).missing_messages("ngram-1", 0, 100)
    assert not [p for p in pending if "pin" in p.text or "Rex" in p.text]
    assert not [t for t in fake.texts() if "4321" in t or "Rex" in t]
