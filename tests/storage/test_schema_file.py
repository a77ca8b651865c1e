"""bot/storage/migrations/schema.sql is what the migrations leave in a blank database, so the schema
can be read in one place; a migration added without regenerating it fails here."""

from __future__ import annotations

from pathlib import Path

from bot.storage.migrations import MIGRATIONS
from tests.support.schema import SCHEMA_FILE, migrated_blank_schema


async def test_schema_sql_is_what_the_migrations_make_of_a_blank_database(tmp_path: Path) -> None:
    recorded = SCHEMA_FILE.read_text(encoding="utf-8")
    made = await migrated_blank_schema(tmp_path)
    assert recorded.split("\n\n", 1)[1] == made, "run `python -m tests.support.schema` after changing a migration"


def test_there_is_one_module_per_version_in_order() -> None:
    versions = [version for version, _, _ in MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1))
    modules = sorted(p.stem for p in SCHEMA_FILE.parent.glob("v*.py"))
    assert modules == [f"v{v:02d}" for v in versions]
