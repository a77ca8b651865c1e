"""Vector search's test setup: a configuration with the fake embeddings endpoint, and the keys stored
with vectors."""

from __future__ import annotations

from pathlib import Path
from typing import Any


from bot.app.runtime import Runtime
from bot.storage.embeddings import EmbeddingRepository
from tests.support.config import make_config
from tests.support.fakes.embeddings import FakeEmbeddings


KEY = "emb-secret-key-123"


def config_with(tmp_path: Path, fake: FakeEmbeddings, model: str = "ngram-1", **mate: Any) -> Any:
    embeddings = {"base-url": fake.base_url, "model": model, "api-key": KEY}
    return make_config(tmp_path, memory={"embeddings": embeddings, "auto-summarize-enabled": False}, **mate)


async def vector_keys(rt: Runtime, agent_id: int, model: str = "ngram-1", dim: int = 256) -> set[int]:
    rows = await EmbeddingRepository(rt.core.db).vectors(agent_id, model, dim, "all")
    return {key for key, _, _ in rows}
