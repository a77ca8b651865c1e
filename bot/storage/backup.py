"""A consistent copy of the database, taken while the daemon runs (SQLite's VACUUM INTO)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path


def copy_database(source: Path, target: Path) -> None:
    """Writes a compact, self-contained copy of `source` to `target` (which must not exist).

    Read-only on the source: a running daemon keeps writing meanwhile, and the copy is the
    state of one moment, its write-ahead log included."""
    partial = target.with_name(target.name + ".part")  # a copy that failed never looks like a backup
    partial.unlink(missing_ok=True)
    try:
        with contextlib.closing(sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            conn.execute("PRAGMA busy_timeout=10000")
            conn.execute("VACUUM INTO ?", (str(partial),))
        with contextlib.closing(sqlite3.connect(partial)) as check:
            result = check.execute("PRAGMA integrity_check").fetchone()
        if not result or result[0] != "ok":
            raise sqlite3.DatabaseError(f"the copy failed its integrity check: {result}")
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)
