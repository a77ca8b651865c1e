"""The schema a database holds, as text: what bot/storage/migrations/schema.sql records for a blank
database once every migration ran. Regenerate it with `python -m tests.support.schema`."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
from contextlib import closing
from pathlib import Path

from bot.storage import Database

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "bot" / "storage" / "migrations" / "schema.sql"


def schema_of(path: Path) -> str:
    """Every table, index, trigger and view of the database at `path`, in a stable order."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
            "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 WHEN 'trigger' THEN 2 ELSE 3 END, name"
        ).fetchall()
    return "".join(f"-- {kind} {name}\n{sql};\n\n" for kind, name, sql in rows)


async def migrated_blank_schema(folder: Path) -> str:
    path = folder / "blank.db"
    async with Database(path):
        pass
    return schema_of(path)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        text = asyncio.run(migrated_blank_schema(Path(folder)))
    header = ("-- The schema every migration leaves in a blank database (tests/storage/test_schema_file.py\n"
              "-- checks it). Regenerate: python -m tests.support.schema\n\n")
    SCHEMA_FILE.write_text(header + text, encoding="utf-8")
    sys.stdout.write(f"wrote {SCHEMA_FILE}\n")


if __name__ == "__main__":
    main()
