"""One daemon per database: an OS file lock beside the database file."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from bot.core.errors import MateError


class DatabaseLock:
    """Held while the daemon runs; the OS drops it when the process dies, even by kill -9."""

    def __init__(self, database: str | Path) -> None:
        self.path = Path(f"{database}.lock")
        self._fd: int | None = None

    def __enter__(self) -> DatabaseLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise MateError(f"another matebot is already running on {self.path.with_suffix('')} "
                            f"(it holds {self.path}); stop it first") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock
            self._fd = None
