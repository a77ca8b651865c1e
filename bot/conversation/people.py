"""PersonDirectory: who sent a message — the owner, a linked person, or someone met for the first time."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bot.conversation.access import AccessPolicies
from bot.core.config import MateConfig
from bot.storage.people import OWNER_PERSON_ID, PersonRepository
from bot.core.records import PersonRecord

log = logging.getLogger(__name__)

OWNER_NAME = "Owner"  # the owner's person, unless a `people` entry lists one of the owner's ids


@dataclass(frozen=True, slots=True)
class Person:
    id: int
    name: str
    is_owner: bool


def account_of(channel: str, sender_id: str) -> str:
    return f"{channel}:{sender_id}"


def split_account(account: str) -> tuple[str, str]:
    channel, _, sender_id = account.partition(":")
    return channel, sender_id


class PersonDirectory:
    """Maps a channel account to its person.

    The owner is person 1: every admin id of every channel, the console and the API (the
    access policy decides who is an admin). `mate.people` links one person's accounts; an
    account met for the first time gets a person of its own, named as the channel names it.
    """

    def __init__(self, config: MateConfig, people: PersonRepository, access: AccessPolicies) -> None:
        self._config = config
        self._people = people
        self._access = access
        self._lock = asyncio.Lock()
        self._cache: dict[str, Person] = {}

    def _owner_accounts(self) -> set[str]:
        return {account_of(channel, admin) for channel, admin in self._access.admin_accounts()}

    async def sync(self) -> None:
        """Write the config's links (at start-up): the owner's row and every `people` entry."""
        owner_ids = self._owner_accounts()
        owner_entry = next((p for p in self._config.people if owner_ids & set(p.ids)), None)
        await self._people.ensure_owner(owner_entry.name if owner_entry else OWNER_NAME)
        owner_linked = sorted(owner_ids | set(owner_entry.ids if owner_entry else ()))
        # A link the config no longer has (an admin removed, an id taken out of an entry) is
        # undone first: that account is no longer the owner, nor the person it was linked to.
        listed = [a for entry in self._config.people for a in entry.ids]
        dropped = await self._people.unlink_all_but(split_account(a) for a in [*owner_linked, *listed])
        if dropped:
            log.info("%d account link(s) no longer in the config were undone", dropped)
        await self._people.link(owner_entry.name if owner_entry else OWNER_NAME,
                                [split_account(a) for a in owner_linked], person_id=OWNER_PERSON_ID)
        for entry in self._config.people:
            if entry is owner_entry:
                continue
            await self._people.link(entry.name, [split_account(a) for a in entry.ids])
        self._cache.clear()

    async def resolve(self, channel: str, sender_id: str, sender_name: str | None, *, is_owner: bool) -> Person:
        """The person behind one message. The owner (as the access policy judged it) is person 1
        whatever account they write from."""
        key = _OWNER if is_owner else account_of(channel, sender_id)
        if is_owner:
            cached = self._cache.get(key)
            if cached is None:
                owner = await self._people.get(OWNER_PERSON_ID)
                cached = self._cache[key] = Person(OWNER_PERSON_ID, owner.name if owner else OWNER_NAME, True)
            return cached
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        found = await self._people.for_account(channel, sender_id)
        if found is None:
            async with self._lock:
                found = await self._people.create_for_account(channel, sender_id, _name_for(sender_name, key))
            log.info("met person %s for the first time", found.id, extra={"account": key})
        person = Person(found.id, found.name, found.id == OWNER_PERSON_ID)
        self._cache[key] = person
        return person

    async def list(self) -> list[PersonRecord]:
        return await self._people.list()


_OWNER = "owner"  # the cache's key for the owner, whatever account they write from (no account key has no colon)


def _name_for(sender_name: str | None, account: str) -> str:
    name = " ".join((sender_name or "").split())[:80]
    return name or account


def shared_owner_memory(config: MateConfig) -> str:
    """A warning when a route sends direct chats of people other than the owner to one fixed
    agent (the route shipped before per-person memory): they would read the owner's memory."""
    channels = config.channels
    open_to_others = [name for name, channel in (("telegram", channels.telegram), ("discord", channels.discord))
                      if channel.enabled and (channel.allowed_users or channel.dm_policy == "open")]
    for index, rule in enumerate(config.routing):
        reached = open_to_others if rule.channel == "*" else [c for c in open_to_others if c == rule.channel]
        if rule.chat in ("direct", "*") and isinstance(rule.agent, int) and reached:
            return (f"mate.routing.{index} sends direct chats to agent {rule.agent}: people other than you "
                    f"on {', '.join(reached)} share its memory (your PROFILE.md and MEMORY.md); "
                    "use agent: per-person to give each person their own")
    return ""
