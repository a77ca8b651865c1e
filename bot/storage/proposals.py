"""SQL for mate_memory_proposal: a consolidation's MEMORY.md waiting for the owner's approval."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.core.errors import VersionConflict
from bot.storage.sql import SqlDatabase
import bot.storage.file_versions as file_versions
from bot.storage.file_versions import Made

_COLUMNS = "id, agent_id, filename, base_version, content, reason, run_id, status, create_time, expire_time"


@dataclass(frozen=True, slots=True)
class ProposalRecord:
    id: int
    agent_id: int
    filename: str
    base_version: int  # the file's version the proposal was made from: applied only onto it
    content: str
    reason: str
    run_id: int | None
    status: str  # pending | approved | rejected | expired | stale | replaced
    create_time: str
    expire_time: str


def _record(row: Any) -> ProposalRecord:
    return ProposalRecord(*(row[i] for i in range(10)))


class ProposalRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def propose(self, agent_id: int, filename: str, base_version: int, content: str, reason: str,
                      run_id: int | None, expire_time: str) -> int:
        """The agent's new proposal; one it had waiting is replaced."""
        async with self._db.transaction() as conn:
            await conn.execute("UPDATE mate_memory_proposal SET status = 'replaced' WHERE agent_id = ? "
                               "AND status = 'pending'", (agent_id,))
            row = await conn.fetchone(
                "INSERT INTO mate_memory_proposal(agent_id, filename, base_version, content, reason, run_id, status, "
                "create_time, expire_time) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?) RETURNING id",
                (agent_id, filename, base_version, content, reason, run_id, self._db.now(), expire_time))
            assert row is not None
            return int(row[0])

    async def pending(self, agent_id: int, now: str) -> ProposalRecord | None:
        """The agent's waiting proposal; one past its expiry is marked expired first."""
        await self._db.execute("UPDATE mate_memory_proposal SET status = 'expired' WHERE agent_id = ? "
                               "AND status = 'pending' AND expire_time <= ?", (agent_id, now))
        row = await self._db.fetchone(f"SELECT {_COLUMNS} FROM mate_memory_proposal WHERE agent_id = ? "
                                      "AND status = 'pending' ORDER BY id DESC LIMIT 1", (agent_id,))
        return _record(row) if row else None

    async def get(self, proposal_id: int) -> ProposalRecord | None:
        row = await self._db.fetchone(f"SELECT {_COLUMNS} FROM mate_memory_proposal WHERE id = ?", (proposal_id,))
        return _record(row) if row else None

    async def set_status(self, proposal_id: int, status: str) -> bool:
        result = await self._db.execute("UPDATE mate_memory_proposal SET status = ? WHERE id = ? "
                                        "AND status = 'pending'", (status, proposal_id))
        return result.rowcount == 1

    async def apply(self, proposal: ProposalRecord, keep: int) -> bool:
        """Write the proposed content, if the file is still at the version it was made from, and
        mark it approved, in one transaction; otherwise VersionConflict and nothing changes.
        False (nothing changes) when it was rejected or approved meanwhile (the chat and the page at once)."""
        now = self._db.now()
        async with self._db.transaction() as conn:
            claimed = await conn.execute("UPDATE mate_memory_proposal SET status = 'approved' WHERE id = ? "
                                         "AND status = 'pending'", (proposal.id,))
            if claimed.rowcount != 1:
                return False
            row = await conn.fetchone(
                "SELECT id, version, content, update_time FROM mate_workspace_file WHERE agent_id = ? AND filename = ? "
                "AND deleted = 0", (proposal.agent_id, proposal.filename),
            )
            version = int(row[1]) if row else 0
            if row is None or version != proposal.base_version:
                raise VersionConflict(proposal.filename, proposal.base_version, version)
            try:
                await file_versions.replace(conn, int(row[0]), proposal.content,
                                            Made("emergence", proposal.run_id, keep, now),
                                            current=version, before=(str(row[2]), str(row[3])))
            except file_versions.MovedOn:  # changed meanwhile by another writer
                raise VersionConflict(proposal.filename, proposal.base_version, version + 1) from None
        return True

    async def owner_direct_chat(self, channel: str) -> str | None:
        """The owner's (person 1's) most recently active direct conversation on `channel`."""
        row = await self._db.fetchone(
            "SELECT c.id FROM mate_conversation c WHERE c.channel = ? AND c.is_group = 0 AND EXISTS ("
            "SELECT 1 FROM mate_message m JOIN mate_person_account a ON a.channel = c.channel "
            "AND a.sender_id = m.sender_id WHERE m.conversation_id = c.id AND m.role = 'user' AND a.person_id = 1) "
            "ORDER BY c.update_time DESC LIMIT 1", (channel,))
        return str(row[0]) if row else None
