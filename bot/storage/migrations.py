"""Numbered schema migrations; each runs once, in order, inside one transaction."""

from __future__ import annotations

from bot.storage.remembered import NOT_INCOGNITO
from bot.storage.search_schema import (
    FILE_TEXT,
    FILE_TEXT_V6,
    FILE_TRIGRAM,
    FILE_TRIGRAM_V6,
    MESSAGE_TEXT,
    MESSAGE_TEXT_V6,
    MESSAGE_TRIGRAM,
    MESSAGE_TRIGRAM_V6,
    PIECES,
    SCOPE_MESSAGE,
    SEARCHED_MESSAGE,
    SEARCH_SCOPE,
    TRIGGERS,
    search_triggers,
)

# From version 12 mate_cron_job also holds the reminders people schedule in a chat (task type
# `reminder`). SQLite cannot widen a CHECK constraint in place, so the table is copied into
# one with the new columns; nothing references it, so the copy keeps every id and row.
_CRON_JOB_COLUMNS = ("id, agent_id, name, cron_expression, timezone, task_type, trigger_message, enabled, "
                     "last_run_time, next_run_time, create_time, update_time")
_REMINDER_INDEXES = (
    """CREATE INDEX IF NOT EXISTS ix_cron_job_target ON mate_cron_job(target_channel, target_chat_id)
        WHERE task_type = 'reminder'""",
    """CREATE INDEX IF NOT EXISTS ix_cron_job_due ON mate_cron_job(next_run_time)
        WHERE task_type = 'reminder' AND enabled = 1""",
)
_REMINDERS = (
    """CREATE TABLE mate_cron_job_v12 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
        name TEXT NOT NULL,
        cron_expression TEXT NOT NULL,
        timezone TEXT NOT NULL,
        task_type TEXT NOT NULL CHECK (task_type IN ('text', 'emergence', 'reminder')),
        trigger_message TEXT NOT NULL DEFAULT '',
        enabled INTEGER NOT NULL DEFAULT 1,
        last_run_time TEXT,
        next_run_time TEXT,
        create_time TEXT NOT NULL,
        update_time TEXT NOT NULL,
        target_channel TEXT,
        target_chat_id TEXT,
        target_thread_id TEXT,
        run_at TEXT,
        created_by TEXT,
        created_by_name TEXT,
        missed_time TEXT
    )""",
    f"INSERT INTO mate_cron_job_v12({_CRON_JOB_COLUMNS}) SELECT {_CRON_JOB_COLUMNS} FROM mate_cron_job",
    "DROP TABLE mate_cron_job",
    "ALTER TABLE mate_cron_job_v12 RENAME TO mate_cron_job",
    *_REMINDER_INDEXES,
)

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

# From version 15 a reminder keeps its chat's place: the group (Telegram) or server (Discord)
# the access rules admit again at each run (a Discord channel's id does not tell its server).
# The table is copied as for version 12 rather than given an ADD COLUMN, which fails when a
# version is applied again over a database that has it (a restored schema_version): a copy
# over one that has it only loses the places, which then count as unknown.
_CRON_JOB_COLUMNS_V12 = (_CRON_JOB_COLUMNS + ", target_channel, target_chat_id, target_thread_id, run_at, "
                         "created_by, created_by_name, missed_time")
_PLACES = (
    """CREATE TABLE mate_cron_job_v15 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
        name TEXT NOT NULL,
        cron_expression TEXT NOT NULL,
        timezone TEXT NOT NULL,
        task_type TEXT NOT NULL CHECK (task_type IN ('text', 'emergence', 'reminder')),
        trigger_message TEXT NOT NULL DEFAULT '',
        enabled INTEGER NOT NULL DEFAULT 1,
        last_run_time TEXT,
        next_run_time TEXT,
        create_time TEXT NOT NULL,
        update_time TEXT NOT NULL,
        target_channel TEXT,
        target_chat_id TEXT,
        target_thread_id TEXT,
        run_at TEXT,
        created_by TEXT,
        created_by_name TEXT,
        missed_time TEXT,
        target_place_id TEXT
    )""",
    f"INSERT INTO mate_cron_job_v15({_CRON_JOB_COLUMNS_V12}) SELECT {_CRON_JOB_COLUMNS_V12} FROM mate_cron_job",
    # The ids handed out so far stay handed out: a cancelled reminder's number never comes back.
    "DELETE FROM sqlite_sequence WHERE name = 'mate_cron_job_v15'",
    "UPDATE sqlite_sequence SET name = 'mate_cron_job_v15' WHERE name = 'mate_cron_job'",
    "DROP TABLE mate_cron_job",
    "ALTER TABLE mate_cron_job_v15 RENAME TO mate_cron_job",
    *_REMINDER_INDEXES,  # they went with the old table
)


MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "initial schema",
        (
            """CREATE TABLE IF NOT EXISTS mate_agent (
                id INTEGER PRIMARY KEY,
                name TEXT NOT NULL,
                create_time TEXT NOT NULL,
                update_time TEXT NOT NULL
            )""",
            # Which agent answers a chat routed `per-chat`; kept so a group keeps its agent.
            """CREATE TABLE IF NOT EXISTS mate_chat_agent (
                chat_key TEXT PRIMARY KEY,
                agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
                create_time TEXT NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS mate_conversation (
                id TEXT PRIMARY KEY,
                agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
                channel TEXT NOT NULL,
                chat_key TEXT NOT NULL,
                title TEXT,
                trigger_source TEXT NOT NULL,
                summary TEXT,
                summary_upto_message_id INTEGER NOT NULL DEFAULT 0,
                memory_upto_message_id INTEGER NOT NULL DEFAULT 0,
                create_time TEXT NOT NULL,
                update_time TEXT NOT NULL,
                archived INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX IF NOT EXISTS ix_conversation_chat ON mate_conversation(chat_key, archived)",
            """CREATE TABLE IF NOT EXISTS mate_message (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                conversation_id TEXT NOT NULL REFERENCES mate_conversation(id),
                role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
                content TEXT NOT NULL,
                token_count INTEGER NOT NULL DEFAULT 0,
                sender_id TEXT,
                sender_name TEXT,
                create_time TEXT NOT NULL
            )""",
            "CREATE INDEX IF NOT EXISTS ix_message_conversation ON mate_message(conversation_id, id)",
            """CREATE TABLE IF NOT EXISTS mate_workspace_file (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
                filename TEXT NOT NULL,
                content TEXT NOT NULL DEFAULT '',
                file_size INTEGER NOT NULL DEFAULT 0,
                enabled INTEGER NOT NULL DEFAULT 0,
                sort_order INTEGER NOT NULL DEFAULT 0,
                create_time TEXT NOT NULL,
                update_time TEXT NOT NULL,
                deleted INTEGER NOT NULL DEFAULT 0,
                version INTEGER NOT NULL DEFAULT 1
            )""",
            """CREATE UNIQUE INDEX IF NOT EXISTS ux_workspace_file_live
                ON mate_workspace_file(agent_id, filename) WHERE deleted = 0""",
            """CREATE TABLE IF NOT EXISTS mate_cron_job (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
                name TEXT NOT NULL,
                cron_expression TEXT NOT NULL,
                timezone TEXT NOT NULL,
                task_type TEXT NOT NULL CHECK (task_type IN ('text', 'emergence')),
                trigger_message TEXT NOT NULL DEFAULT '',
                enabled INTEGER NOT NULL DEFAULT 1,
                last_run_time TEXT,
                next_run_time TEXT,
                create_time TEXT NOT NULL,
                update_time TEXT NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS mate_memory_pending (
                conversation_id TEXT PRIMARY KEY REFERENCES mate_conversation(id),
                agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
                upto_message_id INTEGER NOT NULL,
                trigger_source TEXT NOT NULL DEFAULT 'channel',
                attempts INTEGER NOT NULL DEFAULT 0,
                due_time TEXT NOT NULL,
                last_error TEXT,
                create_time TEXT NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS mate_memory_run (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                agent_id INTEGER NOT NULL,
                kind TEXT NOT NULL,
                conversation_id TEXT,
                status TEXT NOT NULL,
                reason TEXT,
                started TEXT NOT NULL,
                finished TEXT,
                error TEXT
            )""",
            "CREATE INDEX IF NOT EXISTS ix_memory_run_agent ON mate_memory_run(agent_id, id)",
        ),
    ),
    (
        2,
        "conversation message_count and update_time kept by a trigger",
        (
            # One statement per stored turn instead of a transaction of several: the trigger
            # keeps the conversation row current inside the same statement, atomically.
            "ALTER TABLE mate_conversation ADD COLUMN message_count INTEGER NOT NULL DEFAULT 0",
            """UPDATE mate_conversation SET message_count = (
                SELECT COUNT(*) FROM mate_message m
                WHERE m.conversation_id = mate_conversation.id AND m.role IN ('user', 'assistant'))""",
            """CREATE TRIGGER IF NOT EXISTS tr_message_inserted AFTER INSERT ON mate_message BEGIN
                UPDATE mate_conversation
                SET update_time = NEW.create_time,
                    message_count = message_count + (NEW.role IN ('user', 'assistant'))
                WHERE id = NEW.conversation_id;
            END""",
        ),
    ),
    (
        3,
        "mate_message.content_format says whether content is text or a JSON block array",
        (
            """ALTER TABLE mate_message ADD COLUMN content_format TEXT NOT NULL DEFAULT 'text'
                CHECK (content_format IN ('text', 'blocks'))""",
            # Earlier rows were told apart by their text; only what this program itself wrote
            # counts as blocks: tool turns, and assistant turns in its compact encoding (no
            # space after the colon) made only of block types the Messages API sends.
            """UPDATE mate_message SET content_format = 'blocks'
                WHERE role = 'tool'
                   OR (role = 'assistant' AND substr(content, 1, 9) = '[{"type":'
                       AND substr(content, 10, 1) = '"' AND json_valid(content)
                       AND json_type(content) = 'array'
                       AND NOT EXISTS (SELECT 1 FROM json_each(mate_message.content) AS b
                                       WHERE json_type(b.value) <> 'object'
                                          OR json_extract(b.value, '$.type') NOT IN
                                             ('text', 'tool_use', 'thinking', 'redacted_thinking')))""",
        ),
    ),
    (
        4,
        "mate_message.external_id: the platform's message id, so a redelivered message is answered once",
        (
            "ALTER TABLE mate_message ADD COLUMN external_id TEXT",
            """CREATE INDEX IF NOT EXISTS ix_message_external ON mate_message(conversation_id, external_id)
                WHERE external_id IS NOT NULL""",
            # Start-up recovery looks for recent user messages left without a reply.
            "CREATE INDEX IF NOT EXISTS ix_conversation_update ON mate_conversation(update_time)",
        ),
    ),
    (
        5,
        "mate_llm_usage: the tokens each model call was billed, for /status and cost checks",
        (
            """CREATE TABLE IF NOT EXISTS mate_llm_usage (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                agent_id INTEGER,
                conversation_id TEXT,
                purpose TEXT NOT NULL,
                model TEXT NOT NULL DEFAULT '',
                input_tokens INTEGER NOT NULL DEFAULT 0,
                cache_creation_input_tokens INTEGER NOT NULL DEFAULT 0,
                cache_read_input_tokens INTEGER NOT NULL DEFAULT 0,
                output_tokens INTEGER NOT NULL DEFAULT 0,
                create_time TEXT NOT NULL
            )""",
            "CREATE INDEX IF NOT EXISTS ix_llm_usage_time ON mate_llm_usage(create_time)",
        ),
    ),
    (
        6,
        "full-text search over messages and workspace files (unicode61 + trigram), kept by triggers",
        (
            # Words, English stemmed; CJK text is stored one character per token, so a
            # two-character word is a phrase query (mate_search_spaced: bot/storage/search_text.py).
            # scope ("agent3 notes") lets a search match only its agent's rows, so another
            # agent's thousands of hits are never ranked.
            """CREATE VIRTUAL TABLE IF NOT EXISTS mate_search_text USING fts5(
                body, scope, tokenize = 'porter unicode61 remove_diacritics 2')""",
            # Substrings in any script (exact phrases), and what a hit shows: the original
            # text and where it came from. rowid = message id * 2, or workspace file id * 2 + 1.
            """CREATE VIRTUAL TABLE IF NOT EXISTS mate_search_trigram USING fts5(
                body, source UNINDEXED, agent_id UNINDEXED, conversation_id UNINDEXED, ref_id UNINDEXED,
                filename UNINDEXED, time UNINDEXED, tokenize = 'trigram')""",
            *search_triggers(MESSAGE_TEXT_V6, FILE_TEXT_V6, MESSAGE_TRIGRAM_V6, FILE_TRIGRAM_V6),
            # What was stored before this version.
            f"{MESSAGE_TEXT_V6.format(r='m')} FROM mate_message m WHERE {SEARCHED_MESSAGE.format(r='m')}",
            f"{MESSAGE_TRIGRAM_V6.format(r='m')} FROM mate_message m WHERE {SEARCHED_MESSAGE.format(r='m')}",
            f"{FILE_TEXT_V6.format(r='f')} FROM mate_workspace_file f WHERE f.deleted = 0",
            f"{FILE_TRIGRAM_V6.format(r='f')} FROM mate_workspace_file f WHERE f.deleted = 0",
        ),
    ),
    (
        7,
        "the substring index is scoped per agent, so a substring search reads only its agent's rows",
        (
            *(f"DROP TRIGGER IF EXISTS {name}" for name in TRIGGERS),
            "DROP TABLE IF EXISTS mate_search_trigram",
            """CREATE VIRTUAL TABLE mate_search_trigram USING fts5(
                body, scope, source UNINDEXED, agent_id UNINDEXED, conversation_id UNINDEXED, ref_id UNINDEXED,
                filename UNINDEXED, time UNINDEXED, tokenize = 'trigram')""",
            *search_triggers(MESSAGE_TEXT_V6, FILE_TEXT_V6, MESSAGE_TRIGRAM, FILE_TRIGRAM),
            f"{MESSAGE_TRIGRAM.format(r='m')} FROM mate_message m WHERE {SEARCHED_MESSAGE.format(r='m')}",
            f"{FILE_TRIGRAM.format(r='f')} FROM mate_workspace_file f WHERE f.deleted = 0",
        ),
    ),
    (
        8,
        "the word index also holds each message's previous turn and its date in words",
        (
            *(f"DROP TRIGGER IF EXISTS {name}" for name in TRIGGERS),
            "DROP TABLE IF EXISTS mate_search_text",
            """CREATE VIRTUAL TABLE mate_search_text USING fts5(
                body, scope, prev, date, tokenize = 'porter unicode61 remove_diacritics 2')""",
            *search_triggers(MESSAGE_TEXT, FILE_TEXT, MESSAGE_TRIGRAM, FILE_TRIGRAM, follow_next=True),
            f"{MESSAGE_TEXT.format(r='m')} FROM mate_message m WHERE {SEARCHED_MESSAGE.format(r='m')}",
            f"{FILE_TEXT.format(r='f')} FROM mate_workspace_file f WHERE f.deleted = 0",
        ),
    ),
    (
        9,
        "mate_embedding: one vector per searched message or workspace file and model, for semantic search",
        (
            # key: the search index rowid (message id * 2, workspace file id * 2 + 1). The vector
            # is quantized to one byte per dimension (value + 128, scaled per vector): a quarter
            # of float32's size, and what the search compares. dim 0: the endpoint refused the
            # text, so it is not asked again.
            """CREATE TABLE IF NOT EXISTS mate_embedding (
                key INTEGER NOT NULL,
                model TEXT NOT NULL,
                agent_id INTEGER NOT NULL,
                dim INTEGER NOT NULL,
                vector BLOB NOT NULL,
                norm REAL NOT NULL,
                create_time TEXT NOT NULL,
                PRIMARY KEY (key, model)
            )""",
            "CREATE INDEX IF NOT EXISTS ix_embedding_agent ON mate_embedding(agent_id, model)",
            # A changed or removed text loses its vector; the background backfill makes it again.
            """CREATE TRIGGER IF NOT EXISTS tr_embedding_message_update
                AFTER UPDATE OF content, role, content_format ON mate_message BEGIN
                DELETE FROM mate_embedding WHERE key = OLD.id * 2;
            END""",
            """CREATE TRIGGER IF NOT EXISTS tr_embedding_message_delete AFTER DELETE ON mate_message BEGIN
                DELETE FROM mate_embedding WHERE key = OLD.id * 2;
            END""",
            """CREATE TRIGGER IF NOT EXISTS tr_embedding_file_update
                AFTER UPDATE OF content, filename, deleted, agent_id ON mate_workspace_file BEGIN
                DELETE FROM mate_embedding WHERE key = OLD.id * 2 + 1;
            END""",
            """CREATE TRIGGER IF NOT EXISTS tr_embedding_file_delete AFTER DELETE ON mate_workspace_file BEGIN
                DELETE FROM mate_embedding WHERE key = OLD.id * 2 + 1;
            END""",
        ),
    ),
    (
        10,
        "people: one row per person, and the channel accounts that are that person",
        (
            # Person 1 is the owner (every admin id, the console and the API); the others get a
            # row on first contact or from the config's `people` links.
            """CREATE TABLE IF NOT EXISTS mate_person (
                id INTEGER PRIMARY KEY,
                name TEXT NOT NULL,
                create_time TEXT NOT NULL
            )""",
            # source: 'config' for a link of the config's `people` (or an admin id), undone when
            # the config drops it; 'contact' for an account met in a chat.
            """CREATE TABLE IF NOT EXISTS mate_person_account (
                channel TEXT NOT NULL,
                sender_id TEXT NOT NULL,
                person_id INTEGER NOT NULL REFERENCES mate_person(id) ON DELETE CASCADE,
                source TEXT NOT NULL DEFAULT 'contact',
                PRIMARY KEY (channel, sender_id)
            )""",
            "CREATE INDEX IF NOT EXISTS ix_person_account_person ON mate_person_account(person_id)",
            # Whether several people speak in a conversation: its memory is then kept per member.
            "ALTER TABLE mate_conversation ADD COLUMN is_group INTEGER NOT NULL DEFAULT 0",
            # Before this version a group was a chat with an agent of its own, or a Telegram
            # chat with a negative id (groups; users are positive).
            "UPDATE mate_conversation SET is_group = 1 WHERE chat_key IN (SELECT chat_key FROM mate_chat_agent) "
            "OR chat_key LIKE 'tg:-%' OR id IN (SELECT conversation_id FROM mate_message WHERE role = 'user' "
            "AND sender_id IS NOT NULL GROUP BY conversation_id HAVING COUNT(DISTINCT sender_id) > 1)",
            # A group's agent keeps one profile per member now: its old PROFILE.md, which mixed
            # the members, is no longer shown to the model (it stays, to read or move by hand).
            "UPDATE mate_workspace_file SET enabled = 0 WHERE filename = 'PROFILE.md' AND agent_id IN "
            "(SELECT agent_id FROM mate_chat_agent WHERE chat_key NOT LIKE 'person:%')",
        ),
    ),
    (11, "word searches find an agent's rows through a table of index keys (mate_search_scope)", SEARCH_SCOPE),
    (12, "mate_cron_job holds reminders: task type reminder, the chat to deliver to, a one-shot time, "
         "who made it and a missed run to mention", _REMINDERS),
    (13, "workspace file history, incognito messages, and consolidations proposed for review", _TRUST),
    (14, "workspace files are indexed in pieces: an append indexes only the text it adds", PIECES),
    (15, "a reminder keeps the group or server of its chat (mate_cron_job.target_place_id)", _PLACES),
)

LATEST_VERSION = max(version for version, _, _ in MIGRATIONS)


def newer_schema_message(database: object, found: int) -> str:
    """One line for a database a newer matebot has upgraded: this code must not touch it."""
    return (f"the database {database} was upgraded by a newer matebot (schema version {found}; this "
            f"version knows up to {LATEST_VERSION}); install that version again, or restore a backup "
            f"made by this one")
