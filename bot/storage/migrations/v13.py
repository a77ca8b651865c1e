"""Version 13: workspace file history, incognito messages, and consolidations proposed for review."""

from __future__ import annotations

from bot.storage.remembered import NOT_INCOGNITO
from bot.storage.search_schema import FILE_TEXT, FILE_TRIGRAM, MESSAGE_TEXT, MESSAGE_TRIGRAM, SCOPE_MESSAGE, SEARCHED_MESSAGE, search_triggers

# From version 13 a chat in incognito keeps its messages for the conversation only: those
# after `after_message_id` of a conversation in mate_incognito are never indexed for search
# (so never embedded) nor extracted, and they are deleted when incognito ends. Each
# workspace file keeps its versions (mate_workspace_file_history), and a reviewed
# consolidation waits in mate_memory_proposal for the owner's answer.
_SEARCHED_MESSAGE_V13 = SEARCHED_MESSAGE + " AND " + NOT_INCOGNITO.format(m="{r}")

_TRUST = (
    """CREATE TABLE IF NOT EXISTS mate_workspace_file_history (
        file_id INTEGER NOT NULL,
        version INTEGER NOT NULL,
        content TEXT NOT NULL,
        run_id INTEGER,
        change TEXT NOT NULL CHECK (change IN ('extraction', 'emergence', 'tool', 'api', 'import', 'undo')),
        create_time TEXT NOT NULL,
        PRIMARY KEY (file_id, version)
    )""",
    "CREATE INDEX IF NOT EXISTS ix_workspace_file_history_run ON mate_workspace_file_history(run_id)",
    """CREATE TABLE IF NOT EXISTS mate_incognito (
        conversation_id TEXT PRIMARY KEY,
        after_message_id INTEGER NOT NULL,
        start_time TEXT NOT NULL
    )""",
    *(f"DROP TRIGGER IF EXISTS {name}" for name in (
        "tr_search_message_insert", "tr_search_message_update", "tr_search_message_delete",
        "tr_search_scope_message_insert", "tr_search_scope_message_update")),
    *search_triggers(MESSAGE_TEXT, FILE_TEXT, MESSAGE_TRIGRAM, FILE_TRIGRAM, follow_next=True,
                      searched=_SEARCHED_MESSAGE_V13)[:3],
    f"""CREATE TRIGGER IF NOT EXISTS tr_search_scope_message_insert AFTER INSERT ON mate_message
        WHEN {_SEARCHED_MESSAGE_V13.format(r="NEW")} BEGIN {SCOPE_MESSAGE}; END""",
    f"""CREATE TRIGGER IF NOT EXISTS tr_search_scope_message_update AFTER UPDATE OF content, role, content_format
        ON mate_message WHEN {_SEARCHED_MESSAGE_V13.format(r="NEW")} BEGIN {SCOPE_MESSAGE}; END""",
    # status: pending until the owner answers; approved | rejected | expired | stale afterwards.
    """CREATE TABLE IF NOT EXISTS mate_memory_proposal (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id INTEGER NOT NULL,
        filename TEXT NOT NULL,
        base_version INTEGER NOT NULL,
        content TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        run_id INTEGER,
        status TEXT NOT NULL DEFAULT 'pending',
        create_time TEXT NOT NULL,
        expire_time TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS ix_memory_proposal_agent ON mate_memory_proposal(agent_id, status)",
)

VERSION = 13
DESCRIPTION = "workspace file history, incognito messages, and consolidations proposed for review"
STATEMENTS: tuple[str, ...] = _TRUST
