"""Numbered schema migrations; each runs once, in order, inside one transaction."""

from __future__ import annotations

# The search index rows of a message or workspace file `{r}` (NEW in triggers); callers add
# FROM / WHERE. Only what people and the model said is searched: no tool turns.
_SEARCHED_MESSAGE = "{r}.role IN ('user', 'assistant') AND {r}.content_format = 'text'"
_MESSAGE_TEXT = (
    "INSERT INTO mate_search_text(rowid, body, scope) SELECT {r}.id * 2, mate_search_spaced({r}.content), "
    "'agent' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = {r}.conversation_id) || ' conversations'"
)
_MESSAGE_TRIGRAM_V6 = (
    "INSERT INTO mate_search_trigram(rowid, body, source, agent_id, conversation_id, ref_id, filename, time) "
    "SELECT {r}.id * 2, {r}.content, 'conversations', "
    "(SELECT c.agent_id FROM mate_conversation c WHERE c.id = {r}.conversation_id), {r}.conversation_id, {r}.id, "
    "NULL, {r}.create_time"
)
_FILE_TEXT = (
    "INSERT INTO mate_search_text(rowid, body, scope) SELECT {r}.id * 2 + 1, mate_search_spaced({r}.content), "
    "'agent' || {r}.agent_id || ' notes'"
)
_FILE_TRIGRAM_V6 = (
    "INSERT INTO mate_search_trigram(rowid, body, source, agent_id, conversation_id, ref_id, filename, time) "
    "SELECT {r}.id * 2 + 1, {r}.content, 'notes', {r}.agent_id, NULL, {r}.id, {r}.filename, {r}.update_time"
)
# From version 7 the substring index has a scope too ("=3=c": agent 3, conversations; "=3=n":
# notes), so a substring search reads only its own agent's rows: a busy group's thousands of
# matches cost another agent's search nothing. "=3=" is never a piece of "=13=" or "=31=".
_MESSAGE_TRIGRAM = (
    "INSERT INTO mate_search_trigram(rowid, body, scope, source, agent_id, conversation_id, ref_id, filename, "
    "time) SELECT {r}.id * 2, {r}.content, "
    "'=' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = {r}.conversation_id) || '=c', 'conversations', "
    "(SELECT c.agent_id FROM mate_conversation c WHERE c.id = {r}.conversation_id), {r}.conversation_id, {r}.id, "
    "NULL, {r}.create_time"
)
_FILE_TRIGRAM = (
    "INSERT INTO mate_search_trigram(rowid, body, scope, source, agent_id, conversation_id, ref_id, filename, "
    "time) SELECT {r}.id * 2 + 1, {r}.content, '=' || {r}.agent_id || '=n', 'notes', {r}.agent_id, NULL, {r}.id, "
    "{r}.filename, {r}.update_time"
)


def _search_triggers(message_trigram: str, file_trigram: str) -> tuple[str, ...]:
    """The triggers that keep both search tables in step with messages and workspace files."""
    return (
        f"""CREATE TRIGGER IF NOT EXISTS tr_search_message_insert AFTER INSERT ON mate_message
            WHEN {_SEARCHED_MESSAGE.format(r="NEW")} BEGIN
            {_MESSAGE_TEXT.format(r="NEW")};
            {message_trigram.format(r="NEW")};
        END""",
        f"""CREATE TRIGGER IF NOT EXISTS tr_search_message_update AFTER UPDATE OF content, role, content_format
            ON mate_message BEGIN
            DELETE FROM mate_search_text WHERE rowid = OLD.id * 2;
            DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2;
            {_MESSAGE_TEXT.format(r="NEW")} WHERE {_SEARCHED_MESSAGE.format(r="NEW")};
            {message_trigram.format(r="NEW")} WHERE {_SEARCHED_MESSAGE.format(r="NEW")};
        END""",
        """CREATE TRIGGER IF NOT EXISTS tr_search_message_delete AFTER DELETE ON mate_message BEGIN
            DELETE FROM mate_search_text WHERE rowid = OLD.id * 2;
            DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2;
        END""",
        f"""CREATE TRIGGER IF NOT EXISTS tr_search_file_insert AFTER INSERT ON mate_workspace_file
            WHEN NEW.deleted = 0 BEGIN
            {_FILE_TEXT.format(r="NEW")};
            {file_trigram.format(r="NEW")};
        END""",
        f"""CREATE TRIGGER IF NOT EXISTS tr_search_file_update
            AFTER UPDATE OF content, filename, deleted, agent_id, update_time ON mate_workspace_file BEGIN
            DELETE FROM mate_search_text WHERE rowid = OLD.id * 2 + 1;
            DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2 + 1;
            {_FILE_TEXT.format(r="NEW")} WHERE NEW.deleted = 0;
            {file_trigram.format(r="NEW")} WHERE NEW.deleted = 0;
        END""",
        """CREATE TRIGGER IF NOT EXISTS tr_search_file_delete AFTER DELETE ON mate_workspace_file BEGIN
            DELETE FROM mate_search_text WHERE rowid = OLD.id * 2 + 1;
            DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2 + 1;
        END""",
    )


_TRIGGERS = ("tr_search_message_insert", "tr_search_message_update", "tr_search_message_delete",
             "tr_search_file_insert", "tr_search_file_update", "tr_search_file_delete")

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
            *_search_triggers(_MESSAGE_TRIGRAM_V6, _FILE_TRIGRAM_V6),
            # What was stored before this version.
            f"{_MESSAGE_TEXT.format(r='m')} FROM mate_message m WHERE {_SEARCHED_MESSAGE.format(r='m')}",
            f"{_MESSAGE_TRIGRAM_V6.format(r='m')} FROM mate_message m WHERE {_SEARCHED_MESSAGE.format(r='m')}",
            f"{_FILE_TEXT.format(r='f')} FROM mate_workspace_file f WHERE f.deleted = 0",
            f"{_FILE_TRIGRAM_V6.format(r='f')} FROM mate_workspace_file f WHERE f.deleted = 0",
        ),
    ),
    (
        7,
        "the substring index is scoped per agent, so a substring search reads only its agent's rows",
        (
            *(f"DROP TRIGGER IF EXISTS {name}" for name in _TRIGGERS),
            "DROP TABLE IF EXISTS mate_search_trigram",
            """CREATE VIRTUAL TABLE mate_search_trigram USING fts5(
                body, scope, source UNINDEXED, agent_id UNINDEXED, conversation_id UNINDEXED, ref_id UNINDEXED,
                filename UNINDEXED, time UNINDEXED, tokenize = 'trigram')""",
            *_search_triggers(_MESSAGE_TRIGRAM, _FILE_TRIGRAM),
            f"{_MESSAGE_TRIGRAM.format(r='m')} FROM mate_message m WHERE {_SEARCHED_MESSAGE.format(r='m')}",
            f"{_FILE_TRIGRAM.format(r='f')} FROM mate_workspace_file f WHERE f.deleted = 0",
        ),
    ),
)

LATEST_VERSION = max(version for version, _, _ in MIGRATIONS)


def newer_schema_message(database: object, found: int) -> str:
    """One line for a database a newer matebot has upgraded: this code must not touch it."""
    return (f"the database {database} was upgraded by a newer matebot (schema version {found}; this "
            f"version knows up to {LATEST_VERSION}); install that version again, or restore a backup "
            f"made by this one")
