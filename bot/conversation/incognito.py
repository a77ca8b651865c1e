"""IncognitoExpiry: ends incognito (deleting its messages) in chats where it began more than `hours` ago."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta

from bot.core.clock import Clock, iso, parse_iso, utc_now
from bot.storage.incognito import IncognitoRepository

log = logging.getLogger(__name__)

LONGEST_WAIT = 300.0  # seconds between looks when nothing is due sooner


class IncognitoExpiry:
    def __init__(self, incognito: IncognitoRepository, hours: float, forget: Callable[[str], None], *,
                 clock: Clock = utc_now) -> None:
        self._incognito = incognito
        self._span = timedelta(hours=hours)
        self._forget = forget  # the window's cached messages of a conversation
        self._clock = clock

    async def expire(self) -> int:
        """End every incognito older than the span; how many ended."""
        ended = 0
        for state in await self._incognito.started_before(iso(self._clock() - self._span)):
            count = await self._incognito.end(state.conversation_id)
            self._forget(state.conversation_id)
            if count is not None:
                ended += 1
                log.info("incognito ended after %s: %d messages deleted", self._span, count,
                         extra={"conversation_id": state.conversation_id})
        return ended

    async def run(self) -> None:
        while True:
            await self.expire()
            oldest = await self._incognito.oldest_start()
            wait = LONGEST_WAIT
            if oldest is not None:
                due = (parse_iso(oldest) + self._span - self._clock()).total_seconds()
                wait = min(wait, max(1.0, due))
            await asyncio.sleep(wait)
