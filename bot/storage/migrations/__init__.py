"""Numbered schema migrations, one module per version; each runs once, in order, inside one
transaction. schema.sql is what they leave in a blank database (a test checks it)."""

from __future__ import annotations

from bot.storage.migrations import v01, v02, v03, v04, v05, v06, v07, v08, v09, v10, v11, v12, v13, v14, v15, v16, v17, v18

_VERSIONS = (v01, v02, v03, v04, v05, v06, v07, v08, v09, v10, v11, v12, v13, v14, v15, v16, v17, v18)
MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = tuple(
    (m.VERSION, m.DESCRIPTION, m.STATEMENTS) for m in _VERSIONS
)

LATEST_VERSION = max(version for version, _, _ in MIGRATIONS)


def newer_schema_message(database: object, found: int) -> str:
    """One line for a database a newer matebot has upgraded: this code must not touch it."""
    return (f"the database {database} was upgraded by a newer matebot (schema version {found}; this "
            f"version knows up to {LATEST_VERSION}); install that version again, or restore a backup "
            f"made by this one")
