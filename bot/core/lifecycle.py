"""AsyncResource: what `async with` means for the daemon's long-lived parts, written once."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class AsyncResource:
    """Opened when an `async with` block is entered and closed when it is left, however it is left."""

    async def open(self) -> None:
        """Acquire what the resource holds (connections, tasks); the default holds nothing."""

    async def close(self) -> None:
        """Release what `open` acquired; called once, also after an error inside the block."""

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
