"""Leases (mate_lease): one daemon at a time polls a bot, answers a chat, runs an agent's memory work.

A lease is a row held by one daemon until its expiry. The holder renews it (every third of its
life); another daemon takes it only once it has expired, so a daemon killed mid-work is taken
over within a lease's life. A daemon's name is stable across restarts (its host and data
folder): restarted, it takes its own leases back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta

from bot.core.clock import Clock, iso
from bot.core.clock import utc_now as clock_now
from bot.storage.sql import SqlDatabase

log = logging.getLogger(__name__)

LEASE_SECONDS = 60.0
RENEW_SECONDS = 20.0


class LeaseRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def take(self, name: str, holder: str, now: datetime, seconds: float) -> bool:
        """Take or renew `name` for `holder` until now + seconds; False while another holds it."""
        rows = await self._db.write_returning(
            "INSERT INTO mate_lease(name, holder, expires_time) VALUES (?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET holder = excluded.holder, expires_time = excluded.expires_time "
            "WHERE mate_lease.holder = excluded.holder OR mate_lease.expires_time <= ? RETURNING holder",
            (name, holder, iso(now + timedelta(seconds=seconds)), iso(now)))
        return bool(rows)

    async def release(self, name: str, holder: str) -> None:
        await self._db.execute("DELETE FROM mate_lease WHERE name = ? AND holder = ?", (name, holder))

    async def held(self, prefix: str, now: datetime) -> dict[str, str]:
        """The unexpired leases whose name starts with `prefix`: name -> holder."""
        rows = await self._db.fetchall(
            "SELECT name, holder FROM mate_lease WHERE substr(name, 1, ?) = ? AND expires_time > ?",
            (len(prefix), prefix, iso(now)))
        return {str(r[0]): str(r[1]) for r in rows}

    async def holder(self, name: str, now: datetime) -> str | None:
        row = await self._db.fetchone("SELECT holder FROM mate_lease WHERE name = ? AND expires_time > ?",
                                      (name, iso(now)))
        return str(row[0]) if row else None


class Leases:
    """This daemon's leases: taken, kept renewed while held, given back."""

    def __init__(self, repository: LeaseRepository, holder: str, *, clock: Clock = clock_now,
                 seconds: float = LEASE_SECONDS, renew_every: float = RENEW_SECONDS,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._repository = repository
        self.holder = holder
        self._clock = clock
        self._seconds = seconds
        self._renew_every = renew_every
        self._sleep = sleep

    @property
    def renew_every(self) -> float:
        return self._renew_every

    async def take(self, name: str) -> bool:
        return await self._repository.take(name, self.holder, self._clock(), self._seconds)

    async def release(self, name: str) -> None:
        await self._repository.release(name, self.holder)

    @asynccontextmanager
    async def held(self, name: str, lost: asyncio.Event | None = None) -> AsyncIterator[bool]:
        """Try once to take `name`: yields whether it is held. While held it is renewed; should a
        renewal find it taken over (or fail until it may have run out), `lost` is set (the work
        should stop). Given back at the end."""
        if not await self.take(name):
            yield False
            return
        async with self._kept(name, lost):
            yield True

    @asynccontextmanager
    async def waited(self, name: str, poll: float = 0.2) -> AsyncIterator[None]:
        """Hold `name`, waiting (polling) while another daemon holds it."""
        while not await self.take(name):
            await self._sleep(poll)
        async with self._kept(name, None):
            yield

    @asynccontextmanager
    async def _kept(self, name: str, lost: asyncio.Event | None) -> AsyncIterator[None]:
        """A lease just taken: renewed while the block runs, given back after it."""
        keeper = asyncio.create_task(self._keep(name, lost), name=f"lease-{name}")
        try:
            yield
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            try:
                await self.release(name)
            except Exception:  # it runs out on its own
                log.warning("could not give back the lease %s", name, exc_info=True)

    async def _keep(self, name: str, lost: asyncio.Event | None) -> None:
        renewed = self._clock()
        while True:
            await self._sleep(self._renew_every)
            asked = self._clock()  # the new expiry counts from here
            left = self._seconds - (asked - renewed).total_seconds()
            try:
                # A renewal that hangs (a network cut without a reset) must not outlast the lease.
                async with asyncio.timeout(max(left - self._renew_every, 0.001)):
                    kept = await self.take(name)
            except Exception:  # the database is away: keep trying while the lease may still be ours
                if (self._clock() - renewed).total_seconds() < self._seconds - self._renew_every:
                    log.warning("renewing the lease %s failed; trying again", name, exc_info=True)
                    continue
                log.warning("the lease %s could not be renewed before it ran out: another daemon may take it", name)
                kept = False
            if not kept:
                if lost is not None:
                    lost.set()
                log.warning("the lease %s is lost (taken over, or not renewed in time)", name)
                return
            renewed = asked
