"""`matebot migrate --to postgresql://…`: a SQLite database copied whole, counts checked, search rebuilt."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bot.app.cli.data import migrate
from bot.app.core import open_core
from bot.storage.usage import LlmUsageRecord
from memory.recall.search import MemorySearchService
from tests.support.config import make_config, pinned_clock
from tests.support.postgres import Cluster
from tests.support.storage_backends import fresh_database


async def _fill(tmp_path: Path) -> None:
    async with open_core(make_config(tmp_path), clock=pinned_clock()) as core:
        repos = core.repos
        await repos.conversations.create("telegram:-5", agent_id=1, channel="telegram", chat_key="telegram:-5",
                                         trigger_source="channel", is_group=True)
        await repos.messages.add_many("telegram:-5", [
            ("user", "[Ann] my parrot is called Kiwi", 8), ("user", "[Bo] and mine sings opera", 6),
            ("assistant", "Lovely birds!", 3)])
        await repos.incognito.start("telegram:-5")
        await repos.messages.add("telegram:-5", "user", "[Ann] my secret pin is 4242", 7)  # kept off the index
        note = await repos.workspace_files.get(1, "MEMORY.md")
        assert note is not None
        assert await repos.workspace_files.append_content(note.id, "\n- Ann's parrot is Kiwi\n", note.version)
        await repos.people.create_for_account("telegram", "7", "Ann")
        await repos.llm_usage.queue(LlmUsageRecord("chat", "m", 100, 0, 0, 20, agent_id=1))
        await repos.memory_runs.start(1, "extraction", "telegram:-5")


async def test_migrate_copies_every_table_checks_the_counts_and_search_finds_the_same(
        tmp_path: Path, postgres_cluster: Cluster | str, capsys: pytest.CaptureFixture[str]) -> None:
    if isinstance(postgres_cluster, str):
        pytest.skip(f"PostgreSQL: {postgres_cluster}")
    await _fill(tmp_path)
    config = make_config(tmp_path)
    async with fresh_database(postgres_cluster) as url:
        assert await migrate(config, argparse.Namespace(to=url)) == 0
        out = capsys.readouterr().out
        assert "every count matches" in out and "DIFFERENT" not in out
        assert [line.split() for line in out.splitlines() if line.startswith("mate_message ")] == [
            ["mate_message", "4", "4", "ok"]]
        async with open_core(make_config(tmp_path, storage={"url": url}), clock=pinned_clock()) as pg, \
                open_core(config, clock=pinned_clock()) as lite:
            assert await pg.repos.messages.count_all() == await lite.repos.messages.count_all() == 4
            assert (await pg.repos.conversations.get("telegram:-5")) == (await lite.repos.conversations.get("telegram:-5"))
            for query in ("parrot", "Kiwi", "opera", "secret pin"):
                found = [(await MemorySearchService(core.repos.search).search(1, query))["results"]
                         for core in (pg, lite)]
                # The same messages and files (each backend ranks by its own formula, so the order may
                # differ; a file is indexed whole after the copy, not entry by entry as it grew).
                assert {(r["source"], r.get("messageId"), r.get("filename")) for r in found[0]} == \
                    {(r["source"], r.get("messageId"), r.get("filename")) for r in found[1]}, query
            hidden = await MemorySearchService(pg.repos.search).search(1, "secret pin 4242")
            assert not any("4242" in r["snippet"] for r in hidden["results"])  # incognito stays out of the index
            # The copy goes on where the original left off: new rows get new ids.
            new_id = await pg.repos.messages.add("telegram:-5", "user", "[Bo] hello again", 3)
            assert new_id > await lite.repos.messages.last_id("telegram:-5")
        # A second copy into the same database is refused: it is no longer empty.
        assert await migrate(config, argparse.Namespace(to=url)) == 1
        assert "already holds rows" in capsys.readouterr().err


async def test_migrate_refuses_what_is_not_a_postgres_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    await _fill(tmp_path)
    assert await migrate(make_config(tmp_path), argparse.Namespace(to="mysql://x")) == 1
    assert "--to must be a postgresql:// URL" in capsys.readouterr().err


async def test_backup_and_restore_point_to_pg_dump_on_postgres(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.app.cli.data import backup, restore

    config = make_config(tmp_path, storage={"url": "postgresql://matebot:secret@db.example/matebot"})
    assert await backup(config, argparse.Namespace(dir=tmp_path / "out")) == 1
    assert await restore(config, argparse.Namespace(backup=tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert err.count("use pg_dump and pg_restore") == 2 and "secret" not in err
    assert not (tmp_path / "out").exists()


def test_a_storage_url_of_another_kind_is_one_line_naming_the_key(tmp_path: Path) -> None:
    from bot.core.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        make_config(tmp_path, storage={"url": "mysql://x/y"})
    assert "mate.storage.url" in str(refused.value) and "\n" not in str(refused.value)


def test_a_database_password_never_shows_unmasked(tmp_path: Path) -> None:
    from bot.core.redaction import Redactor, config_secrets
    from bot.core.redaction import redacted

    for url, password in (("postgresql://matebot:S3c/retPw9@db.example/matebot", "S3c/retPw9"),
                          ("postgresql://matebot:pa?ss#Word9@db.example/matebot", "pa?ss#Word9"),
                          ("postgresql://matebot@db.example/matebot?password=S3cretPw&sslmode=require", "S3cretPw")):
        config = make_config(tmp_path, storage={"url": url})
        redact = Redactor(config_secrets(config))
        assert password not in redact(f"check-config: url: {url}") and password not in redacted(url)
        assert "db.example/matebot" in redacted(url)


async def test_a_url_the_driver_cannot_read_is_refused_without_quoting_it(tmp_path: Path) -> None:
    from bot.core.errors import StorageError
    from bot.storage.postgres.database import PostgresDatabase

    with pytest.raises(StorageError) as refused:
        async with PostgresDatabase("postgresql://matebot:S3cretPw9@db.example:notaport/matebot"):
            pass
    assert "S3cretPw9" not in str(refused.value) and "mate.storage.url" in str(refused.value)
