"""SQL for mate_workspace_file; every write bumps `version`."""

from __future__ import annotations

from typing import Any

from bot.storage.sql import SqlDatabase
import bot.storage.file_versions as file_versions
from bot.storage.file_versions import Change, Made, MovedOn
from bot.core.records import WorkspaceFileRecord

_UNCONDITIONAL_TRIES = 5
_COLUMNS = (
    "id, agent_id, filename, content, file_size, enabled, sort_order, create_time, update_time, "
    "deleted, version"
)


def _record(row: Any) -> WorkspaceFileRecord:
    return WorkspaceFileRecord(
        id=row["id"], agent_id=row["agent_id"], filename=row["filename"], content=row["content"],
        file_size=row["file_size"], enabled=bool(row["enabled"]), sort_order=row["sort_order"],
        create_time=row["create_time"], update_time=row["update_time"],
        deleted=bool(row["deleted"]), version=row["version"],
    )


class WorkspaceFileRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def get(self, agent_id: int, filename: str) -> WorkspaceFileRecord | None:
        row = await self._db.fetchone(
            f"SELECT {_COLUMNS} FROM mate_workspace_file WHERE agent_id = ? AND filename = ? AND deleted = 0",
            (agent_id, filename),
        )
        return _record(row) if row else None

    async def list(self, agent_id: int, prefix: str = "", *, enabled_only: bool = False) -> list[WorkspaceFileRecord]:
        sql = f"SELECT {_COLUMNS} FROM mate_workspace_file WHERE agent_id = ? AND deleted = 0"
        params: list[Any] = [agent_id]
        if prefix:
            # substr instead of LIKE: a prefix may contain % or _.
            sql += " AND substr(filename, 1, ?) = ?"
            params += [len(prefix), prefix]
        if enabled_only:
            sql += " AND enabled = 1"
        sql += " ORDER BY sort_order, filename"
        return [_record(r) for r in await self._db.fetchall(sql, params)]

    async def insert(
        self, agent_id: int, filename: str, content: str, *, enabled: bool, sort_order: int,
        change: Change = "import", run_id: int | None = None, keep: int = 50,
    ) -> WorkspaceFileRecord | None:
        """Create a live file (its version 1 in history); None when a live file of that name exists."""
        made = Made(change, run_id, keep, self._db.now())
        async with self._db.transaction() as conn:
            created = await file_versions.create(conn, agent_id, filename, content, made, enabled=enabled,
                                                 sort_order=sort_order, if_absent=True)
        return None if created is None else await self.get(agent_id, filename)

    async def update_content(
        self, file_id: int, content: str, expected_version: int | None, *, change: Change = "api",
        run_id: int | None = None, keep: int = 50,
    ) -> bool:
        """Replace content and keep the new version in history; with expected_version, only if the
        row still has that version."""
        made = Made(change, run_id, keep, self._db.now())
        # Without an expected version the write is unconditional: another writer coming first
        # (PostgreSQL: two transactions at once) only means reading the file again.
        for _ in range(_UNCONDITIONAL_TRIES if expected_version is None else 1):
            try:
                async with self._db.transaction() as conn:
                    row = await conn.fetchone(
                        "SELECT version, content, update_time FROM mate_workspace_file WHERE id = ? AND deleted = 0",
                        (file_id,),
                    )
                    if row is None or (expected_version is not None and int(row[0]) != expected_version):
                        return False
                    await file_versions.replace(conn, file_id, content, made, current=int(row[0]),
                                                before=(str(row[1]), str(row[2])))
                return True
            except MovedOn:  # another writer came first: as a version that no longer matches
                continue
        return False

    async def append_content(
        self, file_id: int, text: str, expected_version: int | None, *, change: Change = "api",
        run_id: int | None = None, keep: int = 50,
    ) -> bool:
        """Add `text` at the end, in SQL (the file's text is neither read nor written whole), and
        keep the new version in history; with expected_version, only if the row still has it."""
        try:
            async with self._db.transaction() as conn:
                row = await conn.fetchone("SELECT version FROM mate_workspace_file WHERE id = ? AND deleted = 0",
                                          (file_id,))
                if row is None or (expected_version is not None and int(row[0]) != expected_version):
                    return False
                await file_versions.append(conn, file_id, text, Made(change, run_id, keep, self._db.now()),
                                           current=int(row[0]))
        except MovedOn:
            return False
        return True

    async def set_enabled(self, file_id: int, enabled: bool) -> None:
        await self._db.execute(
            "UPDATE mate_workspace_file SET enabled = ?, update_time = ?, version = version + 1 WHERE id = ?",
            (int(enabled), self._db.now(), file_id),
        )

    async def set_sort_order(self, file_id: int, sort_order: int) -> None:
        await self._db.execute(
            "UPDATE mate_workspace_file SET sort_order = ?, update_time = ?, version = version + 1 WHERE id = ?",
            (sort_order, self._db.now(), file_id),
        )

    async def soft_delete(self, file_id: int, *, change: Change = "api", keep: int = 50) -> bool:
        """The live file removed (the row stays, the name is free again), kept in history as an
        empty version; False when it was not live."""
        try:
            async with self._db.transaction() as conn:
                row = await conn.fetchone("SELECT version FROM mate_workspace_file WHERE id = ? AND deleted = 0",
                                          (file_id,))
                if row is None:
                    return False
                await file_versions.delete(conn, file_id, Made(change, None, keep, self._db.now()),
                                           current=int(row[0]))
        except MovedOn:
            return False
        return True

    async def count(self, agent_id: int) -> int:
        row = await self._db.fetchone(
            "SELECT COUNT(*) FROM mate_workspace_file WHERE agent_id = ? AND deleted = 0", (agent_id,)
        )
        return int(row[0]) if row else 0
