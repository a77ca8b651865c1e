"""Shared fixtures: a migrated SQLite file in tmp_path and the core services over it."""

from __future__ import annotations

import sys

# Bytecode is kept even where PYTHONDONTWRITEBYTECODE is set (container images set it): else each
# xdist worker compiles the suite and matebot afresh on every run (~2 s of CPU each). Set before
# the imports below, so that they are cached too; __pycache__/ is git-ignored.
sys.dont_write_bytecode = False

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot.app.core import Core, open_core
from bot.core.config import Config
from bot.core.config.mate import StorageConfig
from tests.support.config import make_config
from tests.support.postgres import Cluster
from tests.support.storage_backends import BACKENDS, cluster_or_reason, storage_url
from tests.support.tls import one_root_certificate


@pytest.fixture(scope="session")
def _one_root_certificate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return one_root_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(autouse=True)
def _loopback_without_proxy(monkeypatch: pytest.MonkeyPatch, _one_root_certificate: Path) -> None:
    # httpx and aiohttp obey proxy variables even for 127.0.0.1; our fakes live there.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    # PTB warns (an error under filterwarnings=error) unless its timedelta API is chosen.
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "MATE_CONFIG", "MATE_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # The fakes speak plain HTTP: a small trust store spares each SDK client loading the whole bundle.
    monkeypatch.setenv("SSL_CERT_FILE", str(_one_root_certificate))
    # A `python -m bot` started by a test would otherwise compile every module of matebot again
    # (~0.2 s of CPU a start, over a hundred starts a run): it keeps its bytecode, as an install does.
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster | str]:
    """The throwaway PostgreSQL cluster of the storage contract (started when a test first asks),
    or why there is none."""
    yield from cluster_or_reason()


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The storage a `core` test runs on: each runs on SQLite and on PostgreSQL (the storage
    contract), unless its module is marked `sqlite_only`."""
    return str(request.param)


@pytest.fixture
async def core(config: Config, backend: str, postgres_cluster: Cluster | str) -> AsyncIterator[Core]:
    async with storage_url(backend, postgres_cluster) as url:
        if url:
            config = config.model_copy(update={"mate": config.mate.model_copy(
                update={"storage": StorageConfig(url=url)})})
        async with open_core(config) as opened:
            yield opened


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A module marked `sqlite_only` tests what only SQLite has: its PostgreSQL runs are left out."""
    kept, left_out = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("backend") == "postgresql"
        (left_out if on_postgres and item.get_closest_marker("sqlite_only") else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept

