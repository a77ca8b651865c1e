"""`matebot backup DIR` copies the database and the kept media files while the daemon runs;
`matebot restore BACKUP` puts such a copy back in place of the database."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bot.core.errors import MateError, StorageError
from bot.app.instance_lock import DatabaseLock
from bot.storage.backup import copy_database, settle_for_restore, verify_restored

BACKUP_PATTERN = "mate-*.db"
SET_ASIDE = ".before-restore"
# Everything SQLite may keep beside the database file; a leftover one would be read as
# belonging to the restored file and corrupt it.
SIDE_FILES = ("", "-wal", "-shm", "-journal")


@dataclass(frozen=True, slots=True)
class BackupReport:
    database: Path
    media_copied: int  # files new since the last backup into the same folder


@dataclass(frozen=True, slots=True)
class RestoreReport:
    database: Path
    source: Path
    schema_version: int
    set_aside: tuple[Path, ...]  # the files the restore replaced, renamed
    media_copied: int  # media files of the backup that data/media lacked
    media_error: str | None = None  # the database is restored, but not every media file


def back_up(database: Path, target_dir: Path, *, now: datetime | None = None,
            media: Path | None = None) -> BackupReport:
    """DIR/mate-<UTC time>.db, plus DIR/media/ (a file kept once, under its hash, is copied once).
    `media`: the daemon's media folder, by default beside the database."""
    if not database.exists():
        raise FileNotFoundError(f"no database at {database}")
    target_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")
    target = target_dir / f"mate-{stamp}.db"
    if target.exists():
        raise FileExistsError(f"{target} already exists")
    copy_database(database, target)
    copied = 0
    media = media or database.parent / "media"
    if media.is_dir():
        copied = _copy_new_files(media, target_dir / "media")
    return BackupReport(target, copied)


def find_backup(given: Path) -> Path:
    """The database file to restore: `given` itself, or the newest mate-<UTC time>.db in that folder."""
    if given.is_dir():
        found = sorted(given.glob(BACKUP_PATTERN))  # the UTC stamp sorts by time
        if not found:
            raise FileNotFoundError(f"no backup ({BACKUP_PATTERN}) in {given}")
        return found[-1]
    if not given.exists():
        raise FileNotFoundError(f"no backup at {given}")
    return given


def restore(database: Path, backup: Path, *, media: Path | None = None) -> RestoreReport:
    """Replaces `database` by the backup `backup` (a file, or the folder `matebot backup` wrote).

    Refused while a daemon holds the database. Nothing is changed unless the backup passes
    the integrity check; the replaced files are renamed `<name>.before-restore` (numbered
    when an earlier restore left some), never deleted. The backup's media files are added to
    data/media: they are named by their content, so none overwrites another."""
    source = find_backup(backup)
    if source.resolve() == database.resolve():
        raise MateError(f"{source} is the database itself; name a backup")
    with DatabaseLock(database):  # also keeps a daemon from starting halfway through
        staging = database.with_name(database.name + ".restoring")
        _remove_with_side_files(staging)
        try:
            _copy_private(source, staging)
            beside = source.with_name(source.name + "-wal")
            if beside.exists():  # a copy of a live database taken by hand: its log holds recent writes
                _copy_private(beside, staging.with_name(staging.name + "-wal"))
            settle_for_restore(staging, source=source)
        except BaseException:
            _remove_with_side_files(staging)
            raise
        set_aside = _set_aside(database)
        try:
            staging.rename(database)
            _remove_with_side_files(staging)
            version = verify_restored(database)
        except (OSError, StorageError) as exc:  # checked a moment ago: a failing disk, most likely
            _put_back(database, set_aside)
            raise StorageError(f"{exc}; the database is as it was before") from None
    kept = source.parent / "media"
    try:
        copied = _copy_new_files(kept, media or database.parent / "media") if kept.is_dir() else 0
    except OSError as exc:
        return RestoreReport(database, source, version, set_aside, 0,
                             f"{exc.strerror or exc} ({exc.filename or media})")
    return RestoreReport(database, source, version, set_aside, copied)


def _put_back(database: Path, set_aside: tuple[Path, ...]) -> None:
    """Undoes a restore that failed after the old files were set aside: the restored file goes
    to `<name>.failed-restore`, the set-aside files back to their names."""
    failed = database.with_name(database.name + ".failed-restore")
    _remove_with_side_files(failed)
    for side in SIDE_FILES:
        current = database.with_name(database.name + side)
        if current.exists():
            current.rename(failed.with_name(failed.name + side))
    for moved in set_aside:
        side = next(s for s in sorted(SIDE_FILES, key=len, reverse=True) if moved.name.endswith(s))
        moved.rename(database.with_name(database.name + side))


def _set_aside(database: Path) -> tuple[Path, ...]:
    """Renames the database and its side files to `<name>.before-restore` (`-wal`, `-shm` after
    it, so SQLite still pairs them: the set-aside file opens with its last writes)."""
    present = [side for side in SIDE_FILES if database.with_name(database.name + side).exists()]

    def renamed(suffix: str, side: str) -> Path:
        return database.with_name(database.name + suffix + side)

    suffix, number = SET_ASIDE, 1
    while any(renamed(suffix, side).exists() for side in SIDE_FILES):
        number += 1  # an earlier restore's files stay: one set per restore, never overwritten
        suffix = f"{SET_ASIDE}.{number}"
    moved = []
    # The side files first, the database last: a crash in between must never leave an old
    # -wal beside a new database (SQLite would read it as part of that one).
    for side in sorted(present, key=lambda side: side == ""):
        database.with_name(database.name + side).rename(renamed(suffix, side))
        moved.append(renamed(suffix, side))
    return tuple(moved)


def _copy_private(source: Path, target: Path) -> None:
    shutil.copyfile(source, target)
    os.chmod(target, 0o600)


def _copy_new_files(source_dir: Path, target_dir: Path) -> int:
    target_dir.mkdir(mode=0o700, exist_ok=True)
    copied = 0
    for file in source_dir.iterdir():
        target = target_dir / file.name
        if file.is_file() and not file.name.endswith(".part") and not target.exists():
            partial = target.with_name(target.name + ".part")  # an interrupted copy is redone next time
            _copy_private(file, partial)
            partial.rename(target)
            copied += 1
    return copied


def _remove_with_side_files(database: Path) -> None:
    for side in SIDE_FILES:
        database.with_name(database.name + side).unlink(missing_ok=True)
