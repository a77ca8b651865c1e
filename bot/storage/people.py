"""SQL for mate_person and mate_person_account: who a channel account is."""

from __future__ import annotations

from collections.abc import Iterable

from bot.storage.sql import SqlDatabase, Transaction
from bot.core.records import PersonRecord

OWNER_PERSON_ID = 1
# A person's own agent is bound like a group's: in mate_chat_agent, under this key.
PERSON_BINDING_PREFIX = "person:"


def person_binding(person_id: int) -> str:
    return f"{PERSON_BINDING_PREFIX}{person_id}"




async def _next_id(conn: Transaction) -> int:
    """A new person's id: above every other, and never the owner's."""
    top = await conn.fetchone("SELECT COALESCE(MAX(id), 0) FROM mate_person")
    return max(int(top[0]) if top else 0, OWNER_PERSON_ID) + 1


class PersonRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def ensure_owner(self, name: str) -> None:
        """Person 1 exists; its name follows the config."""
        await self._db.execute(
            "INSERT INTO mate_person(id, name, create_time) VALUES (?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET name = excluded.name",
            (OWNER_PERSON_ID, name, self._db.now()),
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
        now = self._db.now()
        async with self._db.transaction() as conn:
            await conn.serialize("mate_person ids")  # the next free id, and an account's one person
            row = await conn.fetchone(
                "SELECT p.id, p.name, p.create_time FROM mate_person_account a JOIN mate_person p "
                "ON p.id = a.person_id WHERE a.channel = ? AND a.sender_id = ?", (channel, sender_id),
            )
            if row:
                return PersonRecord(int(row[0]), row[1], row[2])
            person_id = await _next_id(conn)
            await conn.execute("INSERT INTO mate_person(id, name, create_time) VALUES (?, ?, ?)",
                               (person_id, name, now))
            await conn.execute("INSERT INTO mate_person_account(channel, sender_id, person_id) VALUES (?, ?, ?)",
                               (channel, sender_id, person_id))
        return PersonRecord(person_id, name, now)

    async def link(self, name: str, accounts: Iterable[tuple[str, str]], *, person_id: int | None = None) -> int:
        """One person for `accounts` (a config entry): `person_id` when given, else the person one
        of them already is (the oldest, never the owner), else a new one. Every account then
        points at it, as a config link."""
        listed = list(accounts)
        now = self._db.now()
        async with self._db.transaction() as conn:
            await conn.serialize("mate_person ids")
            if person_id is None and listed:
                where = " OR ".join("(channel = ? AND sender_id = ?)" for _ in listed)
                row = await conn.fetchone(
                    f"SELECT MIN(person_id) FROM mate_person_account WHERE ({where}) AND person_id <> ?",
                    [*(part for account in listed for part in account), OWNER_PERSON_ID],
                )
                person_id = int(row[0]) if row and row[0] is not None else None
            if person_id is None:
                person_id = await _next_id(conn)
            await conn.execute(
                "INSERT INTO mate_person(id, name, create_time) VALUES (?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET name = excluded.name", (person_id, name, now))
            for channel, sender_id in listed:
                await conn.execute(
                    "INSERT INTO mate_person_account(channel, sender_id, person_id, source) VALUES (?, ?, ?, 'config') "
                    "ON CONFLICT(channel, sender_id) DO UPDATE SET person_id = excluded.person_id, source = 'config'",
                    (channel, sender_id, person_id))
        return person_id

    async def unlink_all_but(self, kept: Iterable[tuple[str, str]]) -> int:
        """Drop the config links that are not in `kept` (the config no longer has them): such an
        account is met afresh, as a person of its own. How many were dropped."""
        keys = {f"{channel}:{sender_id}" for channel, sender_id in kept}
        rows = await self._db.fetchall(
            "SELECT channel, sender_id FROM mate_person_account WHERE source = 'config'")
        gone = [(r["channel"], r["sender_id"]) for r in rows if f"{r['channel']}:{r['sender_id']}" not in keys]
        for channel, sender_id in gone:
            await self._db.execute("DELETE FROM mate_person_account WHERE channel = ? AND sender_id = ?",
                                   (channel, sender_id))
        return len(gone)

    async def list(self) -> list[PersonRecord]:
        """Every person with their accounts and own agent (the owner's is agent 1, not stored)."""
        rows = await self._db.fetchall(
            "SELECT p.id, p.name, p.create_time, "
            "(SELECT b.agent_id FROM mate_chat_agent b WHERE b.chat_key = ? || CAST(p.id AS TEXT)) AS agent_id "
            "FROM mate_person p ORDER BY p.id",
            (PERSON_BINDING_PREFIX,),
        )
        accounts: dict[int, list[str]] = {}
        for account in await self._db.fetchall(
                "SELECT person_id, channel, sender_id FROM mate_person_account ORDER BY person_id, channel, sender_id"):
            accounts.setdefault(int(account["person_id"]), []).append(f"{account['channel']}:{account['sender_id']}")
        return [
            PersonRecord(int(r["id"]), r["name"], r["create_time"], tuple(accounts.get(int(r["id"]), ())),
                         1 if int(r["id"]) == OWNER_PERSON_ID else r["agent_id"])
            for r in rows
        ]
