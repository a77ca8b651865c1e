"""`eventually`: the one bounded poll tests wait with, instead of sleeping a fixed time."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable

POLL = 0.01
# Generous on purpose: a busy machine (load 15 on 2 cores) must pass, and a condition that
# already holds costs one check however long the bound.
TIMEOUT = 60.0


async def eventually(condition: Callable[[], object], what: str = "the condition", timeout: float = TIMEOUT,
                     *, poll: float = POLL) -> None:
    """Poll `condition` (plain, or returning an awaitable) every `poll` seconds until it is true;
    fail naming `what` once `timeout` seconds have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(poll)
