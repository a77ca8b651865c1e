"""`matebot backup DIR`: the database and the kept media files, copied while the daemon runs."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bot.storage.backup import copy_database


@dataclass(frozen=True, slots=True)
class BackupReport:
    database: Path
    media_copied: int  # files new since the last backup into the same folder


def back_up(database: Path, target_dir: Path, *, now: datetime | None = None) -> BackupReport:
    """DIR/mate-<UTC time>.db, plus DIR/media/ (a file kept once, under its hash, is copied once)."""
    if not database.exists():
        raise FileNotFoundError(f"no database at {database}")
    target_dir.mkdir(parents=True, exist_ok=True)
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")
    target = target_dir / f"mate-{stamp}.db"
    if target.exists():
        raise FileExistsError(f"{target} already exists")
    copy_database(database, target)
    copied = 0
    media = database.parent / "media"
    if media.is_dir():
        kept = target_dir / "media"
        kept.mkdir(exist_ok=True)
        for file in media.iterdir():
            if file.is_file() and not file.name.endswith(".part") and not (kept / file.name).exists():
                shutil.copy2(file, kept / file.name)
                copied += 1
    return BackupReport(target, copied)
