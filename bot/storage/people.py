"""SQL for mate_person and mate_person_account: who a channel account is."""

from __future__ import annotations

from collections.abc import Iterable

from bot.storage.database import Database, utc_now
from bot.storage.records import PersonRecord

OWNER_PERSON_ID = 1
# A person's own agent is bound like a group's: in mate_chat_agent, under this key.
PERSON_BINDING_PREFIX = "person:"


def person_binding(person_id: int) -> str:
    return f"{PERSON_BINDING_PREFIX}{person_id}"


class SqlitePersonRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def ensure_owner(self, name: str) -> None:
        """Person 1 exists; its name follows the config."""
        await self._db.execute(
            "INSERT INTO mate_person(id, name, create_time) VALUES (?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET name = excluded.name",
            (OWNER_PERSON_ID, name, utc_now()),
        )

    async def get(self, person_id: int) -> PersonRecord | None:
        row = await self._db.fetchone("SELECT id, name, create_time FROM mate_person WHERE id = ?", (person_id,))
        return PersonRecord(int(row["id"]), row["name"], row["create_time"]) if row else None

    async def for_account(self, channel: str, sender_id: str) -> PersonRecord | None:
        row = await self._db.fetchone(
            "SELECT p.id, p.name, p.create_time FROM mate_person_account a JOIN mate_person p ON p.id = a.person_id "
            "WHERE a.channel = ? AND a.sender_id = ?",
            (channel, sender_id),
        )
        return PersonRecord(int(row["id"]), row["name"], row["create_time"]) if row else None

    async def create_for_account(self, channel: str, sender_id: str, name: str) -> PersonRecord:
        """The account's person, made now if it has none (first contact); one transaction, so two
        first messages at once still make one person."""
        now = utc_now()
        async with self._db.transaction() as conn:
            async with conn.execute(
                "SELECT p.id, p.name, p.create_time FROM mate_person_account a JOIN mate_person p "
                "ON p.id = a.person_id WHERE a.channel = ? AND a.sender_id = ?", (channel, sender_id),
            ) as cur:
                row = await cur.fetchone()
            if row:
                return PersonRecord(int(row[0]), row[1], row[2])
            # Never id 1: that is the owner's, even before the owner's row is written.
            async with conn.execute("SELECT MAX(COALESCE(MAX(id), 0), ?) + 1 FROM mate_person",
                                    (OWNER_PERSON_ID,)) as cur:
                top = await cur.fetchone()
            person_id = int(top[0]) if top else OWNER_PERSON_ID + 1
            await conn.execute("INSERT INTO mate_person(id, name, create_time) VALUES (?, ?, ?)",
                               (person_id, name, now))
            await conn.execute("INSERT INTO mate_person_account(channel, sender_id, person_id) VALUES (?, ?, ?)",
                               (channel, sender_id, person_id))
        return PersonRecord(person_id, name, now)

    async def link(self, name: str, accounts: Iterable[tuple[str, str]], *, person_id: int | None = None) -> int:
        """One person for `accounts` (a config entry): `person_id` when given, else the person one
        of them already is (the oldest), else a new one. Every account then points at it."""
        listed = list(accounts)
        now = utc_now()
        async with self._db.transaction() as conn:
            if person_id is None and listed:
                where = " OR ".join("(channel = ? AND sender_id = ?)" for _ in listed)
                async with conn.execute(f"SELECT MIN(person_id) FROM mate_person_account WHERE {where}",
                                        [part for account in listed for part in account]) as cur:
                    row = await cur.fetchone()
                found = row[0] if row else None
                person_id = int(found) if found is not None and int(found) != OWNER_PERSON_ID else None
            if person_id is None:
                async with conn.execute("SELECT MAX(COALESCE(MAX(id), 0), ?) + 1 FROM mate_person",
                                        (OWNER_PERSON_ID,)) as cur:
                    top = await cur.fetchone()
                person_id = int(top[0]) if top else OWNER_PERSON_ID + 1
            await conn.execute(
                "INSERT INTO mate_person(id, name, create_time) VALUES (?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET name = excluded.name", (person_id, name, now))
            for channel, sender_id in listed:
                await conn.execute(
                    "INSERT INTO mate_person_account(channel, sender_id, person_id) VALUES (?, ?, ?) "
                    "ON CONFLICT(channel, sender_id) DO UPDATE SET person_id = excluded.person_id",
                    (channel, sender_id, person_id))
        return person_id

    async def list(self) -> list[PersonRecord]:
        """Every person with their accounts and own agent (the owner's is agent 1, not stored)."""
        rows = await self._db.fetchall(
            "SELECT p.id, p.name, p.create_time, "
            "(SELECT group_concat(a.channel || ':' || a.sender_id, char(10)) FROM "
            " (SELECT channel, sender_id FROM mate_person_account WHERE person_id = p.id "
            "  ORDER BY channel, sender_id) a) AS accounts, "
            "(SELECT b.agent_id FROM mate_chat_agent b WHERE b.chat_key = ? || p.id) AS agent_id "
            "FROM mate_person p ORDER BY p.id",
            (PERSON_BINDING_PREFIX,),
        )
        return [
            PersonRecord(int(r["id"]), r["name"], r["create_time"],
                         tuple(r["accounts"].split("\n")) if r["accounts"] else (),
                         1 if int(r["id"]) == OWNER_PERSON_ID else r["agent_id"])
            for r in rows
        ]
