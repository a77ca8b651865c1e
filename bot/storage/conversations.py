"""SQL for mate_conversation and mate_message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from bot.storage.remembered import NOT_INCOGNITO
from bot.storage.sql import SqlDatabase
from bot.core.records import ConversationActivity, ConversationRecord, MessageRecord, WindowRow

_CONVERSATION_COLUMNS = (
    "id, agent_id, channel, chat_key, title, trigger_source, summary, summary_upto_message_id, "
    "memory_upto_message_id, create_time, update_time, archived, is_group"
)
_MESSAGE_COLUMNS = (
    "id, conversation_id, role, content, token_count, sender_id, sender_name, create_time, content_format"
)
CONTENT_FORMATS = ("text", "blocks")
# The memory watermark only moves forward (the new value is given twice): SQLite's two-argument
# MAX has no PostgreSQL twin, so the larger is chosen in plain SQL.
WATERMARK_FORWARD = "CASE WHEN memory_upto_message_id > ? THEN memory_upto_message_id ELSE ? END"
# A stored row: (role, content, token_count) or (role, content, token_count, content_format).
# Without a format, tool turns are blocks (always a tool_result array) and the rest text.
MessageRow = tuple[str, str, int] | tuple[str, str, int, str]


def _conversation(row: Any) -> ConversationRecord:
    return ConversationRecord(
        id=row["id"], agent_id=row["agent_id"], channel=row["channel"], chat_key=row["chat_key"],
        title=row["title"], trigger_source=row["trigger_source"], summary=row["summary"],
        summary_upto_message_id=row["summary_upto_message_id"],
        memory_upto_message_id=row["memory_upto_message_id"], create_time=row["create_time"],
        update_time=row["update_time"], archived=bool(row["archived"]), is_group=bool(row["is_group"]),
    )


def _message(row: Any) -> MessageRecord:
    return MessageRecord(
        id=row["id"], conversation_id=row["conversation_id"], role=row["role"],
        content=row["content"], token_count=row["token_count"], sender_id=row["sender_id"],
        sender_name=row["sender_name"], create_time=row["create_time"], content_format=row["content_format"],
    )


def _format_of(row: MessageRow) -> str:
    content_format = row[3] if len(row) == 4 else ("blocks" if row[0] == "tool" else "text")
    if content_format not in CONTENT_FORMATS:
        raise ValueError(f"unknown content format {content_format!r}")
    return content_format


async def _message_count(db: SqlDatabase, conversation_id: str) -> int:
    row = await db.fetchone("SELECT message_count FROM mate_conversation WHERE id = ?", (conversation_id,))
    return int(row[0]) if row else 0


def _range(conversation_id: str, after_id: int, upto_id: int | None, roles: Sequence[str] | None,
           remembered_only: bool = False) -> tuple[str, list[Any]]:
    """The WHERE clause (and its parameters) for a conversation's messages in (after_id, upto_id]."""
    where = "conversation_id = ? AND id > ?"
    params: list[Any] = [conversation_id, after_id]
    if upto_id is not None:
        where += " AND id <= ?"
        params.append(upto_id)
    if roles:
        where += f" AND role IN ({', '.join('?' for _ in roles)})"
        params.extend(roles)
    if remembered_only:  # what memory may read: incognito messages left out
        where += " AND " + NOT_INCOGNITO.format(m="mate_message")
    return where, params


class ConversationRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def get(self, conversation_id: str) -> ConversationRecord | None:
        row = await self._db.fetchone(
            f"SELECT {_CONVERSATION_COLUMNS} FROM mate_conversation WHERE id = ?", (conversation_id,)
        )
        return _conversation(row) if row else None

    async def active_for_chat(self, chat_key: str) -> ConversationRecord | None:
        row = await self._db.fetchone(
            f"SELECT {_CONVERSATION_COLUMNS} FROM mate_conversation "
            "WHERE chat_key = ? AND archived = 0 ORDER BY create_time DESC, rowid DESC LIMIT 1",
            (chat_key,),
        )
        return _conversation(row) if row else None

    async def count_for_chat(self, chat_key: str) -> int:
        row = await self._db.fetchone(
            "SELECT COUNT(*) FROM mate_conversation WHERE chat_key = ?", (chat_key,)
        )
        return int(row[0]) if row else 0

    async def create(
        self, conversation_id: str, *, agent_id: int, channel: str, chat_key: str,
        trigger_source: str, title: str | None = None, is_group: bool = False,
    ) -> ConversationRecord:
        now = self._db.now()
        await self._db.execute(
            "INSERT INTO mate_conversation(id, agent_id, channel, chat_key, title, trigger_source, create_time, "
            "update_time, is_group) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (conversation_id, agent_id, channel, chat_key, title, trigger_source, now, now, int(is_group)),
        )
        created = await self.get(conversation_id)
        assert created is not None
        return created

    async def archive(self, conversation_id: str) -> None:
        await self._db.execute(
            "UPDATE mate_conversation SET archived = 1, update_time = ? WHERE id = ?",
            (self._db.now(), conversation_id),
        )

    async def set_summary(self, conversation_id: str, summary: str, upto_message_id: int) -> bool:
        """Store a rolling summary; refuses to move the cut-off backwards."""
        result = await self._db.execute(
            "UPDATE mate_conversation SET summary = ?, summary_upto_message_id = ?, update_time = ? "
            "WHERE id = ? AND summary_upto_message_id <= ?",
            (summary, upto_message_id, self._db.now(), conversation_id, upto_message_id),
        )
        return result.rowcount == 1

    async def set_memory_watermark(self, conversation_id: str, upto_message_id: int) -> None:
        await self._db.execute(
            f"UPDATE mate_conversation SET memory_upto_message_id = {WATERMARK_FORWARD}, update_time = ? WHERE id = ?",
            (upto_message_id, upto_message_id, self._db.now(), conversation_id),
        )

    async def message_count(self, conversation_id: str) -> int:
        """User and assistant messages stored (kept by a trigger: no scan of the history)."""
        return await _message_count(self._db, conversation_id)

    async def count(self) -> int:
        row = await self._db.fetchone("SELECT COUNT(*) FROM mate_conversation")
        return int(row[0]) if row else 0

    async def recent_activity(self, agent_id: int | None = None) -> list[ConversationActivity]:
        """Every conversation (of one agent, or all), the most recently active first."""
        # The newest message by id is the last one stored: one index seek per conversation.
        rows = await self._db.fetchall(
            f"SELECT {_CONVERSATION_COLUMNS}, message_count, COALESCE((SELECT m.create_time FROM mate_message m "
            "WHERE m.conversation_id = c.id ORDER BY m.id DESC LIMIT 1), c.update_time) AS last_activity "
            "FROM mate_conversation c WHERE CAST(? AS BIGINT) IS NULL OR agent_id = ? "
            "ORDER BY last_activity DESC, c.rowid DESC",
            (agent_id, agent_id),
        )
        return [ConversationActivity(_conversation(row), row["last_activity"], int(row["message_count"]))
                for row in rows]


class MessageRepository:
    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    async def add(
        self, conversation_id: str, role: str, content: str, token_count: int,
        sender_id: str | None = None, sender_name: str | None = None, content_format: str | None = None,
    ) -> int:
        row: MessageRow = (role, content, token_count) if content_format is None else (
            role, content, token_count, content_format)
        rows = await self._db.write_returning(
            "INSERT INTO mate_message(conversation_id, role, content, token_count, sender_id, "
            "sender_name, create_time, content_format) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (conversation_id, role, content, token_count, sender_id, sender_name, self._db.now(), _format_of(row)),
        )
        return int(rows[0][0])

    async def add_user(
        self, conversation_id: str, content: str, token_count: int,
        sender_id: str | None = None, sender_name: str | None = None, external_id: str | None = None,
        create_time: str | None = None,
    ) -> tuple[int, int]:
        """Store a user message; (its id, the id of the conversation's message before it)."""
        rows = await self._db.write_returning(
            "INSERT INTO mate_message(conversation_id, role, content, token_count, sender_id, "
            "sender_name, create_time, external_id) VALUES (?, 'user', ?, ?, ?, ?, ?, ?) RETURNING id, "
            "(SELECT COALESCE(MAX(m.id), 0) FROM mate_message m "
            " WHERE m.conversation_id = ? AND m.id < mate_message.id)",
            (conversation_id, content, token_count, sender_id, sender_name, create_time or self._db.now(), external_id,
             conversation_id),
        )
        return int(rows[0][0]), int(rows[0][1])

    async def find_external(self, conversation_id: str, external_id: str) -> tuple[MessageRecord, int, bool] | None:
        """The user message with this platform id: (it, the id before it, answered already)."""
        row = await self._db.fetchone(
            f"SELECT {_MESSAGE_COLUMNS}, "
            "(SELECT COALESCE(MAX(p.id), 0) FROM mate_message p WHERE p.conversation_id = m.conversation_id "
            " AND p.id < m.id) AS previous_id, "
            "EXISTS (SELECT 1 FROM mate_message a WHERE a.conversation_id = m.conversation_id AND a.id > m.id) "
            " AS answered "
            "FROM mate_message m WHERE m.conversation_id = ? AND m.external_id = ? AND m.role = 'user' "
            "ORDER BY m.id DESC LIMIT 1",
            (conversation_id, external_id),
        )
        return (_message(row), int(row["previous_id"]), bool(row["answered"])) if row else None

    async def unanswered_since(self, since: str) -> list[tuple[str, MessageRecord, int]]:
        """Active conversations updated since `since` whose newest message is a user message:
        (conversation id, that message, the id before it)."""
        rows = await self._db.fetchall(
            f"SELECT {', '.join('m.' + c.strip() for c in _MESSAGE_COLUMNS.split(','))}, "
            "(SELECT COALESCE(MAX(p.id), 0) FROM mate_message p WHERE p.conversation_id = m.conversation_id "
            " AND p.id < m.id) AS previous_id "
            "FROM mate_conversation c JOIN mate_message m ON m.id = "
            " (SELECT MAX(l.id) FROM mate_message l WHERE l.conversation_id = c.id) "
            "WHERE c.update_time >= ? AND c.archived = 0 AND c.trigger_source <> 'cron' "
            "AND m.role = 'user' AND m.create_time >= ? ORDER BY m.id",
            (since, since),
        )
        return [(r["conversation_id"], _message(r), int(r["previous_id"])) for r in rows]

    async def add_many(
        self, conversation_id: str, rows: Sequence[MessageRow],
        sender_id: str | None = None, sender_name: str | None = None,
    ) -> list[int]:
        """Insert (role, content, token_count) rows with one statement: a turn is stored whole."""
        ids, _ = await self.add_turn(conversation_id, rows, sender_id, sender_name)
        return ids

    async def add_turn(
        self, conversation_id: str, rows: Sequence[MessageRow],
        sender_id: str | None = None, sender_name: str | None = None,
    ) -> tuple[list[int], int]:
        """Like add_many, also returning the conversation's message_count after the insert."""
        if not rows:
            return [], await _message_count(self._db, conversation_id)
        now = self._db.now()
        params: list[Any] = []
        for row in rows:
            role, content, tokens = row[0], row[1], row[2]
            user = role == "user"
            params += [conversation_id, role, content, tokens,
                       sender_id if user else None, sender_name if user else None, now, _format_of(row)]
        values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * len(rows))
        # RETURNING sees the conversation row as it was before the trigger ran, so the
        # count after is that value plus the user/assistant rows of this statement.
        returned = await self._db.write_returning(
            "INSERT INTO mate_message(conversation_id, role, content, token_count, sender_id, "
            f"sender_name, create_time, content_format) VALUES {values} RETURNING id, "
            "(SELECT message_count FROM mate_conversation WHERE id = ?)",
            [*params, conversation_id],
        )
        before = min((int(r[1] or 0) for r in returned), default=0)
        counted = sum(1 for row in rows if row[0] in ("user", "assistant"))
        return sorted(int(r[0]) for r in returned), before + counted

    async def after(self, conversation_id: str, after_id: int, limit: int = 1000) -> list[MessageRecord]:
        """Messages with id > after_id, oldest first."""
        rows = await self._db.fetchall(
            f"SELECT {_MESSAGE_COLUMNS} FROM mate_message WHERE conversation_id = ? AND id > ? "
            "ORDER BY id LIMIT ?",
            (conversation_id, after_id, limit),
        )
        return [_message(r) for r in rows]

    async def recent_senders(self, conversation_id: str, limit: int, *, after_id: int = 0) -> list[str]:
        """The ids of the people who wrote after `after_id`, the most recent speaker first."""
        rows = await self._db.fetchall(
            "SELECT sender_id FROM mate_message WHERE conversation_id = ? AND id > ? AND role = 'user' "
            "AND sender_id IS NOT NULL GROUP BY sender_id ORDER BY MAX(id) DESC LIMIT ?",
            (conversation_id, after_id, limit),
        )
        return [str(r["sender_id"]) for r in rows]

    async def latest(
        self, conversation_id: str, limit: int, *, after_id: int = 0, upto_id: int | None = None,
        roles: Sequence[str] | None = None, remembered_only: bool = False,
    ) -> list[MessageRecord]:
        """The newest `limit` messages in (after_id, upto_id], returned oldest first."""
        rows = await self._page(conversation_id, limit, after_id, upto_id, roles, remembered_only, newest=True)
        return [_message(r) for r in reversed(rows)]

    async def window_page(
        self, conversation_id: str, limit: int, *, after_id: int, upto_id: int,
    ) -> list[WindowRow]:
        """The newest `limit` messages in (after_id, upto_id], oldest first, as WindowRow
        tuples: the window reads a few hundred per turn, so no record object per row."""
        rows = await self._db.fetchall(
            "SELECT id, role, content, token_count, create_time, content_format FROM mate_message "
            "WHERE conversation_id = ? AND id > ? AND id <= ? ORDER BY id DESC LIMIT ?",
            (conversation_id, after_id, upto_id, limit),
        )
        rows.reverse()
        return cast(list[WindowRow], rows)  # sqlite3.Row unpacks like the tuple of its columns

    async def oldest(
        self, conversation_id: str, limit: int, *, after_id: int = 0, upto_id: int | None = None,
        roles: Sequence[str] | None = None, remembered_only: bool = False,
    ) -> list[MessageRecord]:
        """The oldest `limit` messages in (after_id, upto_id], oldest first."""
        rows = await self._page(conversation_id, limit, after_id, upto_id, roles, remembered_only, newest=False)
        return [_message(r) for r in rows]

    async def _page(
        self, conversation_id: str, limit: int, after_id: int, upto_id: int | None, roles: Sequence[str] | None,
        remembered_only: bool, *, newest: bool,
    ) -> list[Any]:
        where, params = _range(conversation_id, after_id, upto_id, roles, remembered_only)
        order = "DESC" if newest else "ASC"
        return await self._db.fetchall(
            f"SELECT {_MESSAGE_COLUMNS} FROM mate_message WHERE {where} ORDER BY id {order} LIMIT ?", [*params, limit])

    async def count(
        self, conversation_id: str, *, after_id: int = 0, upto_id: int | None = None,
        roles: Sequence[str] | None = None,
    ) -> int:
        where, params = _range(conversation_id, after_id, upto_id, roles)
        row = await self._db.fetchone(f"SELECT COUNT(*) FROM mate_message WHERE {where}", params)
        return int(row[0]) if row else 0

    async def chat_key_of(self, message_id: int) -> str | None:
        """The chat a stored message was written in (its conversation's chat key)."""
        row = await self._db.fetchone(
            "SELECT c.chat_key FROM mate_message m JOIN mate_conversation c ON c.id = m.conversation_id "
            "WHERE m.id = ?", (message_id,))
        return str(row[0]) if row else None

    async def count_all(self) -> int:
        """Every message stored, in all conversations."""
        row = await self._db.fetchone("SELECT COUNT(*) FROM mate_message")
        return int(row[0]) if row else 0

    async def last_id(self, conversation_id: str) -> int:
        row = await self._db.fetchone(
            "SELECT COALESCE(MAX(id), 0) FROM mate_message WHERE conversation_id = ?",
            (conversation_id,),
        )
        return int(row[0]) if row else 0
