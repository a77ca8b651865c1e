"""SQL for mate_workspace_file; every write bumps `version`."""

from __future__ import annotations

from typing import Any

from bot.storage.database import Database
from bot.storage.file_history import Change, append_version, record_version
from bot.core.records import WorkspaceFileRecord

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


class SqliteWorkspaceFileRepository:
    def __init__(self, db: Database) -> None:
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
        now = self._db.now()
        async with self._db.transaction() as conn:
            cursor = await conn.execute(
                "INSERT OR IGNORE INTO mate_workspace_file(agent_id, filename, content, file_size, enabled, "
                "sort_order, create_time, update_time, deleted, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 1)",
                (agent_id, filename, content, len(content.encode("utf-8")), int(enabled), sort_order, now, now),
            )
            if cursor.rowcount != 1:
                return None
            await record_version(conn, int(cursor.lastrowid or 0), previous=None, version=1, content=content,
                                 run_id=run_id, change=change, keep=keep, now=now)
        return await self.get(agent_id, filename)

    async def update_content(
        self, file_id: int, content: str, expected_version: int | None, *, change: Change = "api",
        run_id: int | None = None, keep: int = 50,
    ) -> bool:
        """Replace content and keep the new version in history; with expected_version, only if the
        row still has that version."""
        now = self._db.now()
        async with self._db.transaction() as conn:
            async with conn.execute(
                "SELECT version, content, update_time FROM mate_workspace_file WHERE id = ? AND deleted = 0",
                (file_id,),
            ) as cursor:
                row = await cursor.fetchone()
            if row is None or (expected_version is not None and int(row[0]) != expected_version):
                return False
            await conn.execute(
                "UPDATE mate_workspace_file SET content = ?, file_size = ?, update_time = ?, "
                "version = version + 1 WHERE id = ?", (content, len(content.encode("utf-8")), now, file_id))
            await record_version(conn, file_id, previous=(int(row[0]), str(row[1]), str(row[2])),
                                 version=int(row[0]) + 1,
                                 content=content, run_id=run_id, change=change, keep=keep, now=now)
        return True

    async def append_content(
        self, file_id: int, text: str, expected_version: int | None, *, change: Change = "api",
        run_id: int | None = None, keep: int = 50,
    ) -> bool:
        """Add `text` at the end, in SQL (the file's text is neither read nor written whole), and
        keep the new version in history; with expected_version, only if the row still has it."""
        async with self._db.transaction() as conn:
            async with conn.execute("SELECT version FROM mate_workspace_file WHERE id = ? AND deleted = 0",
                                    (file_id,)) as cursor:
                row = await cursor.fetchone()
            if row is None or (expected_version is not None and int(row[0]) != expected_version):
                return False
            await append_version(conn, file_id, text, run_id=run_id, change=change, keep=keep, now=self._db.now())
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

    async def soft_delete(self, file_id: int) -> bool:
        result = await self._db.execute(
            "UPDATE mate_workspace_file SET deleted = 1, update_time = ?, version = version + 1 "
            "WHERE id = ? AND deleted = 0",
            (self._db.now(), file_id),
        )
        return result.rowcount == 1

    async def count(self, agent_id: int) -> int:
        row = await self._db.fetchone(
            "SELECT COUNT(*) FROM mate_workspace_file WHERE agent_id = ? AND deleted = 0", (agent_id,)
        )
        return int(row[0]) if row else 0
