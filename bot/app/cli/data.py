"""`matebot backup`, `matebot restore` and `matebot migrate`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from bot.app.cli.exits import EXIT_OK, EXIT_RUNTIME
from bot.core.config import Config
from bot.core.errors import MateError


async def backup(config: Config, args: argparse.Namespace) -> int:
    import sqlite3

    from bot.app.cli.backup import back_up

    if _on_postgres(config, "backup"):
        return EXIT_RUNTIME
    try:
        report = await asyncio.to_thread(back_up, Path(config.mate.sqlite_file), args.dir,
                                         media=Path(config.mate.database.path).parent / "media")
    except (OSError, sqlite3.Error) as exc:
        print(f"matebot: backup failed: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    print(f"database copied to {report.database}; {report.media_copied} new media files in {args.dir / 'media'}")
    return EXIT_OK


async def restore(config: Config, args: argparse.Namespace) -> int:
    import sqlite3

    from bot.app.cli.backup import restore

    if _on_postgres(config, "restore"):
        return EXIT_RUNTIME
    database = Path(config.mate.sqlite_file)
    try:
        report = await asyncio.to_thread(restore, database, args.backup,
                                         media=Path(config.mate.database.path).parent / "media")
    except (MateError, sqlite3.Error) as exc:
        print(f"matebot: nothing restored: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"matebot: nothing restored: {exc.strerror or exc}{where}", file=sys.stderr)
        return EXIT_RUNTIME
    media = f", {report.media_copied} media files added" if report.media_copied else ""
    kept = (f"the previous files are kept as {', '.join(str(p) for p in report.set_aside)}"
            if report.set_aside else "there was no database before")
    print(f"restored {report.database} from {report.source} (schema version {report.schema_version}, "
          f"integrity ok{media}); {kept}")
    if report.media_error:
        print(f"matebot: the database is restored, but not every media file was copied: {report.media_error}",
              file=sys.stderr)
        return EXIT_RUNTIME
    return EXIT_OK


def _on_postgres(config: Config, command: str) -> bool:
    """backup and restore copy a SQLite file: on PostgreSQL they say what to use instead."""
    if not config.mate.storage.postgres:
        return False
    print(f"matebot: {command} copies a SQLite database; this configuration uses PostgreSQL "
          f"(mate.storage.url): use pg_dump and pg_restore for it", file=sys.stderr)
    return True


async def migrate(config: Config, args: argparse.Namespace) -> int:
    """Copy this configuration's SQLite database into an empty PostgreSQL one, and check the counts."""
    import asyncpg

    from bot.app.instance_lock import DatabaseLock
    from bot.core.redaction import redacted
    from bot.storage import Database
    from bot.storage.postgres.copy import copy_sqlite
    from bot.storage.postgres.database import PostgresDatabase

    target = str(args.to)
    if not target.startswith(("postgresql://", "postgres://")):
        print("matebot: --to must be a postgresql:// URL, e.g. postgresql://matebot@localhost/matebot",
              file=sys.stderr)
        return EXIT_RUNTIME
    storage = config.mate.storage
    if storage.postgres:
        print(f"matebot: this configuration already uses PostgreSQL ({redacted(storage.url)}); migrate copies "
              "from the SQLite database it used before: point mate.storage.url back to it", file=sys.stderr)
        return EXIT_RUNTIME
    source = Path(config.mate.sqlite_file)
    if not source.exists():
        print(f"matebot: there is no database at {source} to copy", file=sys.stderr)
        return EXIT_RUNTIME
    try:
        with DatabaseLock(config.mate.database.path):  # a daemon writing meanwhile would be copied half
            async with Database(source):  # brought to this version's schema, as the target is made
                pass
            async with PostgresDatabase(target, command_timeout=None) as postgres:  # a large copy takes minutes
                counts = await copy_sqlite(source, postgres, progress=lambda line: print(line, file=sys.stderr))
    except MateError as exc:
        print(f"matebot: nothing migrated: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:  # the copy rolled back whole
        print(f"matebot: nothing migrated: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    width = max(len(c.table) for c in counts)
    for copied in counts:
        mark = "ok" if copied.source_rows == copied.target_rows else "DIFFERENT"
        print(f"{copied.table:<{width}}  {copied.source_rows:>9}  {copied.target_rows:>9}  {mark}")
    if any(c.source_rows != c.target_rows for c in counts):
        print("matebot: the counts differ: do not switch to the copy", file=sys.stderr)
        return EXIT_RUNTIME
    print(f"copied {sum(c.source_rows for c in counts)} rows from {source} to {redacted(target)}; every count "
          f"matches. To use it, set mate.storage.url to that URL in your config.yaml.")
    return EXIT_OK
