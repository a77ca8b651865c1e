"""Database copies: a consistent one taken while the daemon runs (VACUUM INTO), and the checks
a copy passes before it is restored."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from bot.core.errors import StorageError
from bot.storage.migrations import LATEST_VERSION, newer_schema_message


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
        os.chmod(partial, 0o600)  # it holds every conversation: private whatever the umask
        with contextlib.closing(sqlite3.connect(partial)) as check:
            result = check.execute("PRAGMA integrity_check").fetchone()
        if not result or result[0] != "ok":
            raise sqlite3.DatabaseError(f"the copy failed its integrity check: {result}")
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)


def settle_for_restore(copy: Path, *, source: Path) -> int:
    """Checks a copy about to be restored and makes it one self-contained file; its schema version.

    Raises StorageError naming `source` (what the copy was made from) when it is not an
    SQLite file, is damaged, is not matebot's, or comes from a newer version.

    A write-ahead log copied along with it is folded in, and the copy leaves WAL mode, so no
    `-wal` file belongs to it any more (the daemon turns WAL on again when it opens it)."""
    try:
        with contextlib.closing(sqlite3.connect(copy, isolation_level=None)) as conn:
            version = _checked_version(conn, source)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode=DELETE")
    except sqlite3.Error as exc:  # "file is not a database", "database disk image is malformed"
        raise StorageError(f"{source}: {exc}") from None
    return version


def verify_restored(database: Path) -> int:
    """The restored file opens and passes the integrity check; its schema version."""
    try:
        with contextlib.closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            return _checked_version(conn, database)
    except sqlite3.Error as exc:
        raise StorageError(f"{database}: {exc}") from None


def _checked_version(conn: sqlite3.Connection, path: Path) -> int:
    result = conn.execute("PRAGMA integrity_check").fetchall()  # "file is not a database" raises here
    if [tuple(row) for row in result] != [("ok",)]:
        problems = "; ".join(str(row[0]) for row in result[:3])
        raise StorageError(f"{path} failed the integrity check: {problems}")
    known = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
    if known is None:
        raise StorageError(f"{path} is an SQLite file but not a matebot database")
    version = int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0])
    if version > LATEST_VERSION:
        raise StorageError(newer_schema_message(path, version))
    return version
