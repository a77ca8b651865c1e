"""`matebot backup` and `matebot restore`."""

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

    try:
        report = await asyncio.to_thread(back_up, Path(config.mate.database.path), args.dir)
    except (OSError, sqlite3.Error) as exc:
        print(f"matebot: backup failed: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    print(f"database copied to {report.database}; {report.media_copied} new media files in {args.dir / 'media'}")
    return EXIT_OK


async def restore(config: Config, args: argparse.Namespace) -> int:
    import sqlite3

    from bot.app.cli.backup import restore

    database = Path(config.mate.database.path)
    try:
        report = await asyncio.to_thread(restore, database, args.backup)
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
