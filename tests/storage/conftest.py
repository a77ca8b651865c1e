"""The storage contract: a test that takes `sql` runs once on SQLite and once on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.storage.sql import SqlDatabase
from tests.support.postgres import Cluster
from tests.support.storage_backends import BACKENDS, open_backend


@pytest.fixture(params=BACKENDS)
async def sql(request: pytest.FixtureRequest, tmp_path: Path, postgres_cluster: Cluster | str) -> AsyncIterator[SqlDatabase]:
    async with open_backend(request.param, tmp_path, postgres_cluster) as db:
        yield db
