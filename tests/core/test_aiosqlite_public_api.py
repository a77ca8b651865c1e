"""The database uses aiosqlite through its public API only, and pins it below its next major version."""

from __future__ import annotations

import asyncio
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from packaging.requirements import Requirement

from bot.storage import Database, Repositories

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def private_uses(monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, str]]:
    """(module, attribute) for every private aiosqlite attribute read from outside aiosqlite."""
    seen: set[tuple[str, str]] = set()

    def spying(cls: type) -> Any:
        def get(self: Any, name: str) -> Any:
            if name.startswith("_") and not name.startswith("__"):
                caller = sys._getframe(1).f_globals.get("__name__", "?")
                if caller.split(".")[0] != "aiosqlite":
                    seen.add((caller, name))
            return object.__getattribute__(self, name)
        return get

    for cls in (aiosqlite.Connection, aiosqlite.Cursor):
        monkeypatch.setattr(cls, "__getattribute__", spying(cls))
    return seen


async def test_every_kind_of_write_uses_only_public_aiosqlite(
    tmp_path: Path, private_uses: set[tuple[str, str]],
) -> None:
    async with Database(tmp_path / "mate.db") as db:
        repos = Repositories.over(db)
        await repos.agents.ensure(1, "Mate")
        await repos.conversations.create("c", agent_id=1, channel="console", chat_key="c", trigger_source="console")
        first = await repos.messages.add("c", "user", "alone", 1)  # a batch of one
        [returned] = await db.write_returning(  # a batch of one with RETURNING
            "INSERT INTO mate_message(conversation_id, role, content, token_count, create_time) "
            "VALUES ('c', 'user', 'returning', 1, 'x') RETURNING id", ())
        assert returned[0] == first + 1

        async def holding_the_lock() -> None:
            async with db.transaction() as conn:
                await conn.execute("INSERT INTO mate_agent(id, name, create_time, update_time) "
                                   "VALUES (50, 'T', 'x', 'x')")
                # The writes below queue up meanwhile, to go out as one batch of many.
                async with asyncio.timeout(30):
                    while len(db._queued) < 21:
                        await asyncio.sleep(0.005)

        writes = [repos.messages.add("c", "user", f"m{i}", 1) for i in range(20)]
        orphan = repos.messages.add("missing-conversation", "user", "orphan", 1)  # fails alone
        results = await asyncio.gather(holding_the_lock(), *writes, orphan, return_exceptions=True)
        assert results[0] is None and all(isinstance(r, int) for r in results[1:21])
        assert isinstance(results[21], aiosqlite.IntegrityError)
        assert await repos.messages.count("c") == 22
        assert await repos.agents.get(50) is not None

    assert private_uses == set()


def test_aiosqlite_is_pinned_below_its_next_major_version() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [requirement] = [Requirement(d) for d in dependencies if Requirement(d).name == "aiosqlite"]
    uppers = [s for s in requirement.specifier if s.operator in ("<", "<=")]
    assert uppers, f"no upper bound: {requirement}"
    assert version("aiosqlite") in requirement.specifier
    assert "1.0" not in requirement.specifier  # the next major version may change the public API too
