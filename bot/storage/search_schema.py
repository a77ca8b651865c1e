"""The search index's schema: the SQL of the triggers that keep mate_search_text,
mate_search_trigram, mate_search_scope and mate_file_piece in step with messages and
workspace files, as the migrations (bot/storage/migrations/) install them version by version."""

from __future__ import annotations

# The search index rows of a message or workspace file `{r}` (NEW in triggers); callers add
# FROM / WHERE. Only what people and the model said is searched: no tool turns.
SEARCHED_MESSAGE = "{r}.role IN ('user', 'assistant') AND {r}.content_format = 'text'"
MESSAGE_TEXT_V6 = (
    "INSERT INTO mate_search_text(rowid, body, scope) SELECT {r}.id * 2, mate_search_spaced({r}.content), "
    "'agent' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = {r}.conversation_id) || ' conversations'"
)
# From version 8 a message is also found by its date in words ("7 May 2023 Sunday": `date`),
# so "what did she say in May 2023" can match, and a person's message by the words of the
# person's message before it (`prev`, without the speaker's "[Name] "): in a group the answer
# is found by its question's words. Only between people: after the assistant's turns it
# would double what every search reads (twice the time) for little gain, since a hit already
# shows the two messages either side of it.
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


def _date_words(time: str) -> str:
    """SQL: a stored time ('YYYY-MM-DD HH:MM:SS', UTC) as "7 May 2023 Sunday"."""
    months = " ".join(f"WHEN '{n:02d}' THEN '{name}'" for n, name in enumerate(_MONTHS, 1))
    weekdays = " ".join(f"WHEN '{n}' THEN '{name}'" for n, name in enumerate(_WEEKDAYS))
    return (f"(ltrim(strftime('%d', {time}), '0') || ' ' || (CASE strftime('%m', {time}) {months} ELSE '' END) "
            f"|| ' ' || strftime('%Y', {time}) || ' ' || (CASE strftime('%w', {time}) {weekdays} ELSE '' END))")


def _without_speaker(content: str) -> str:
    """SQL: a group message without the "[Name] " the router puts before it."""
    return (f"(CASE WHEN substr({content}, 1, 1) = '[' AND instr({content}, '] ') BETWEEN 2 AND 130 "
            f"THEN substr({content}, instr({content}, '] ') + 2) ELSE {content} END)")


_PREVIOUS_TURN = (
    "(SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = {r}.conversation_id AND p.id < {r}.id "
    "AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1)"
)
MESSAGE_TEXT = (
    "INSERT INTO mate_search_text(rowid, body, scope, prev, date) SELECT {r}.id * 2, "
    "mate_search_spaced({r}.content), "
    "'agent' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = {r}.conversation_id) || ' conversations', "
    f"CASE WHEN {{r}}.role = 'user' THEN mate_search_spaced({_without_speaker(_PREVIOUS_TURN)}) END, "
    f"{_date_words('{r}.create_time')}"
)
FILE_TEXT = (
    "INSERT INTO mate_search_text(rowid, body, scope, prev, date) SELECT {r}.id * 2 + 1, "
    "mate_search_spaced({r}.content), 'agent' || {r}.agent_id || ' notes', '', "
    f"{_date_words('{r}.update_time')}"
)
MESSAGE_TRIGRAM_V6 = (
    "INSERT INTO mate_search_trigram(rowid, body, source, agent_id, conversation_id, ref_id, filename, time) "
    "SELECT {r}.id * 2, {r}.content, 'conversations', "
    "(SELECT c.agent_id FROM mate_conversation c WHERE c.id = {r}.conversation_id), {r}.conversation_id, {r}.id, "
    "NULL, {r}.create_time"
)
FILE_TEXT_V6 = (
    "INSERT INTO mate_search_text(rowid, body, scope) SELECT {r}.id * 2 + 1, mate_search_spaced({r}.content), "
    "'agent' || {r}.agent_id || ' notes'"
)
FILE_TRIGRAM_V6 = (
    "INSERT INTO mate_search_trigram(rowid, body, source, agent_id, conversation_id, ref_id, filename, time) "
    "SELECT {r}.id * 2 + 1, {r}.content, 'notes', {r}.agent_id, NULL, {r}.id, {r}.filename, {r}.update_time"
)
# From version 7 the substring index has a scope too ("=3=c": agent 3, conversations; "=3=n":
# notes), so a substring search reads only its own agent's rows: a busy group's thousands of
# matches cost another agent's search nothing. "=3=" is never a piece of "=13=" or "=31=".
MESSAGE_TRIGRAM = (
    "INSERT INTO mate_search_trigram(rowid, body, scope, source, agent_id, conversation_id, ref_id, filename, "
    "time) SELECT {r}.id * 2, {r}.content, "
    "'=' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = {r}.conversation_id) || '=c', 'conversations', "
    "(SELECT c.agent_id FROM mate_conversation c WHERE c.id = {r}.conversation_id), {r}.conversation_id, {r}.id, "
    "NULL, {r}.create_time"
)
FILE_TRIGRAM = (
    "INSERT INTO mate_search_trigram(rowid, body, scope, source, agent_id, conversation_id, ref_id, filename, "
    "time) SELECT {r}.id * 2 + 1, {r}.content, '=' || {r}.agent_id || '=n', 'notes', {r}.agent_id, NULL, {r}.id, "
    "{r}.filename, {r}.update_time"
)


def search_triggers(message_text: str, file_text: str, message_trigram: str, file_trigram: str,
                     follow_next: bool = False, searched: str = SEARCHED_MESSAGE) -> tuple[str, ...]:
    """The triggers that keep both search tables in step with messages and workspace files.

    `follow_next`: the word index holds each message's previous turn, so when a message is
    edited or deleted the next one is indexed again (a deleted text must not stay findable).
    """
    next_id = ("(SELECT n.id FROM mate_message n WHERE n.conversation_id = OLD.conversation_id AND n.id > OLD.id "
               f"AND {searched.format(r='n')} ORDER BY n.id LIMIT 1)")
    again = (f"DELETE FROM mate_search_text WHERE rowid = {next_id} * 2; "
             f"{message_text.format(r='x')} FROM mate_message x WHERE x.id = {next_id};") if follow_next else ""
    return (
        f"""CREATE TRIGGER IF NOT EXISTS tr_search_message_insert AFTER INSERT ON mate_message
            WHEN {searched.format(r="NEW")} BEGIN
            {message_text.format(r="NEW")};
            {message_trigram.format(r="NEW")};
        END""",
        f"""CREATE TRIGGER IF NOT EXISTS tr_search_message_update AFTER UPDATE OF content, role, content_format
            ON mate_message BEGIN
            DELETE FROM mate_search_text WHERE rowid = OLD.id * 2;
            DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2;
            {message_text.format(r="NEW")} WHERE {searched.format(r="NEW")};
            {message_trigram.format(r="NEW")} WHERE {searched.format(r="NEW")};
            {again}
        END""",
        f"""CREATE TRIGGER IF NOT EXISTS tr_search_message_delete AFTER DELETE ON mate_message BEGIN
            DELETE FROM mate_search_text WHERE rowid = OLD.id * 2;
            DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2;
            {again}
        END""",
        f"""CREATE TRIGGER IF NOT EXISTS tr_search_file_insert AFTER INSERT ON mate_workspace_file
            WHEN NEW.deleted = 0 BEGIN
            {file_text.format(r="NEW")};
            {file_trigram.format(r="NEW")};
        END""",
        f"""CREATE TRIGGER IF NOT EXISTS tr_search_file_update
            AFTER UPDATE OF content, filename, deleted, agent_id, update_time ON mate_workspace_file BEGIN
            DELETE FROM mate_search_text WHERE rowid = OLD.id * 2 + 1;
            DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2 + 1;
            {file_text.format(r="NEW")} WHERE NEW.deleted = 0;
            {file_trigram.format(r="NEW")} WHERE NEW.deleted = 0;
        END""",
        """CREATE TRIGGER IF NOT EXISTS tr_search_file_delete AFTER DELETE ON mate_workspace_file BEGIN
            DELETE FROM mate_search_text WHERE rowid = OLD.id * 2 + 1;
            DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2 + 1;
        END""",
    )


# From version 11 a word search finds its agent's rows through mate_search_scope (index key ->
# agent), looked up for each match, instead of the scope word in its MATCH expression: bm25
# counts the rows of every phrase of an expression, and the scope word's are all of the
# agent's rows. Kept by triggers of its own, beside the index's; a row left behind by a
# message that is no longer searched has no index row to match.
SCOPE_MESSAGE = ("INSERT OR REPLACE INTO mate_search_scope(key, agent_id) SELECT NEW.id * 2, c.agent_id "
                  "FROM mate_conversation c WHERE c.id = NEW.conversation_id")
_SCOPE_FILE = "INSERT OR REPLACE INTO mate_search_scope(key, agent_id) VALUES (NEW.id * 2 + 1, NEW.agent_id)"
SEARCH_SCOPE = (
    """CREATE TABLE IF NOT EXISTS mate_search_scope (
        key INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL
    )""",
    "INSERT OR REPLACE INTO mate_search_scope(key, agent_id) SELECT rowid, agent_id FROM mate_search_trigram "
    "WHERE agent_id IS NOT NULL",
    f"""CREATE TRIGGER IF NOT EXISTS tr_search_scope_message_insert AFTER INSERT ON mate_message
        WHEN {SEARCHED_MESSAGE.format(r="NEW")} BEGIN {SCOPE_MESSAGE}; END""",
    f"""CREATE TRIGGER IF NOT EXISTS tr_search_scope_message_update AFTER UPDATE OF content, role, content_format
        ON mate_message WHEN {SEARCHED_MESSAGE.format(r="NEW")} BEGIN {SCOPE_MESSAGE}; END""",
    """CREATE TRIGGER IF NOT EXISTS tr_search_scope_message_delete AFTER DELETE ON mate_message BEGIN
        DELETE FROM mate_search_scope WHERE key = OLD.id * 2; END""",
    f"""CREATE TRIGGER IF NOT EXISTS tr_search_scope_file_insert AFTER INSERT ON mate_workspace_file
        WHEN NEW.deleted = 0 BEGIN {_SCOPE_FILE}; END""",
    f"""CREATE TRIGGER IF NOT EXISTS tr_search_scope_file_update AFTER UPDATE OF deleted, agent_id
        ON mate_workspace_file WHEN NEW.deleted = 0 BEGIN {_SCOPE_FILE}; END""",
    """CREATE TRIGGER IF NOT EXISTS tr_search_scope_file_delete AFTER DELETE ON mate_workspace_file BEGIN
        DELETE FROM mate_search_scope WHERE key = OLD.id * 2 + 1; END""",
)

TRIGGERS = ("tr_search_message_insert", "tr_search_message_update", "tr_search_message_delete",
             "tr_search_file_insert", "tr_search_file_update", "tr_search_file_delete")


# From version 14 a workspace file is indexed in pieces (mate_file_piece: a stretch of its
# content, `length` bytes of its UTF-8 text from byte `start`): a write that only adds text at
# the end (a daily note's new entry) indexes that text as a piece of its own and leaves the rest
# of the file's rows alone; any other change makes the whole file one piece again. A piece is
# the index key id * 2 + 1 (messages keep id * 2), found as its file's text, dated when it was
# written, and it has its own vector. File triggers keep the pieces; piece triggers the index.
# Bytes, not characters: SQLite's length() of a text stops at a NUL character, a blob's does not.
_BYTES = "CAST({} AS BLOB)"
_APPENDED = (f"NEW.deleted = 0 AND OLD.deleted = 0 AND NEW.agent_id = OLD.agent_id AND NEW.filename = OLD.filename "
             f"AND length({_BYTES.format('NEW.content')}) > length({_BYTES.format('OLD.content')}) "
             f"AND substr({_BYTES.format('NEW.content')}, 1, length({_BYTES.format('OLD.content')})) "
             f"= {_BYTES.format('OLD.content')}")
_PIECE_BODY = f"CAST(substr({_BYTES.format('f.content')}, NEW.start + 1, NEW.length) AS TEXT)"
_NEW_BYTES = f"length({_BYTES.format('NEW.content')})"
_OLD_BYTES = f"length({_BYTES.format('OLD.content')})"
PIECES = (
    """CREATE TABLE IF NOT EXISTS mate_file_piece (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        file_id INTEGER NOT NULL,
        start INTEGER NOT NULL,
        length INTEGER NOT NULL,
        create_time TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS ix_file_piece_file ON mate_file_piece(file_id)",
    *(f"DROP TRIGGER IF EXISTS {name}" for name in (
        "tr_search_file_insert", "tr_search_file_update", "tr_search_file_delete", "tr_search_scope_file_insert",
        "tr_search_scope_file_update", "tr_search_scope_file_delete", "tr_embedding_file_update",
        "tr_embedding_file_delete")),
    # Whole files were the odd keys before: their rows and vectors go, their pieces come below.
    "DELETE FROM mate_file_piece",
    "DELETE FROM mate_search_text WHERE rowid % 2 = 1",
    "DELETE FROM mate_search_trigram WHERE rowid % 2 = 1",
    "DELETE FROM mate_search_scope WHERE key % 2 = 1",
    "DELETE FROM mate_embedding WHERE key % 2 = 1",
    f"""CREATE TRIGGER IF NOT EXISTS tr_piece_index_insert AFTER INSERT ON mate_file_piece BEGIN
        INSERT INTO mate_search_text(rowid, body, scope, prev, date) SELECT NEW.id * 2 + 1,
            mate_search_spaced({_PIECE_BODY}), 'agent' || f.agent_id || ' notes', '',
            {_date_words('NEW.create_time')} FROM mate_workspace_file f WHERE f.id = NEW.file_id;
        INSERT INTO mate_search_trigram(rowid, body, scope, source, agent_id, conversation_id, ref_id, filename,
            time) SELECT NEW.id * 2 + 1, {_PIECE_BODY}, '=' || f.agent_id || '=n', 'notes', f.agent_id, NULL, f.id,
            f.filename, NEW.create_time FROM mate_workspace_file f WHERE f.id = NEW.file_id;
        INSERT OR REPLACE INTO mate_search_scope(key, agent_id) SELECT NEW.id * 2 + 1, f.agent_id
            FROM mate_workspace_file f WHERE f.id = NEW.file_id;
    END""",
    """CREATE TRIGGER IF NOT EXISTS tr_piece_index_delete AFTER DELETE ON mate_file_piece BEGIN
        DELETE FROM mate_search_text WHERE rowid = OLD.id * 2 + 1;
        DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2 + 1;
        DELETE FROM mate_search_scope WHERE key = OLD.id * 2 + 1;
        DELETE FROM mate_embedding WHERE key = OLD.id * 2 + 1;
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS tr_piece_file_insert AFTER INSERT ON mate_workspace_file
        WHEN NEW.deleted = 0 AND {_NEW_BYTES} > 0 BEGIN
        INSERT INTO mate_file_piece(file_id, start, length, create_time)
            VALUES (NEW.id, 0, {_NEW_BYTES}, NEW.update_time);
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS tr_piece_file_append AFTER UPDATE OF content ON mate_workspace_file
        WHEN {_APPENDED} BEGIN
        INSERT INTO mate_file_piece(file_id, start, length, create_time)
            VALUES (NEW.id, {_OLD_BYTES}, {_NEW_BYTES} - {_OLD_BYTES}, NEW.update_time);
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS tr_piece_file_update AFTER UPDATE OF content, filename, deleted, agent_id
        ON mate_workspace_file WHEN NOT ({_APPENDED}) AND (NEW.content IS NOT OLD.content
        OR NEW.filename IS NOT OLD.filename OR NEW.deleted IS NOT OLD.deleted OR NEW.agent_id IS NOT OLD.agent_id)
        BEGIN
        DELETE FROM mate_file_piece WHERE file_id = OLD.id;
        INSERT INTO mate_file_piece(file_id, start, length, create_time) SELECT NEW.id, 0, {_NEW_BYTES},
            NEW.update_time WHERE NEW.deleted = 0 AND {_NEW_BYTES} > 0;
    END""",
    """CREATE TRIGGER IF NOT EXISTS tr_piece_file_delete AFTER DELETE ON mate_workspace_file BEGIN
        DELETE FROM mate_file_piece WHERE file_id = OLD.id;
    END""",
    "INSERT INTO mate_file_piece(file_id, start, length, create_time) SELECT id, 0, length(CAST(content AS BLOB)), "
    "update_time FROM mate_workspace_file WHERE deleted = 0 AND length(CAST(content AS BLOB)) > 0 ORDER BY id",
)


# From version 18 a message is also found by the facts an extraction took from it (the daily
# note's lines, each linked to the turn it came from: mate_message_fact), in a `facts` column
# weighing as much as the message itself: "Caroline went to an LGBTQ support group on 7 May"
# finds "[Caroline] I went to a LGBTQ support group yesterday" (LoCoMo dev, facts from its
# own observations: recall@5 0.672 -> 0.697; weight 0.4 as `prev`: 0.685).
FACTS_OF = "(SELECT group_concat(f.fact, ' ') FROM mate_message_fact f WHERE f.message_id = {r}.id)"
MESSAGE_TEXT_V18 = (MESSAGE_TEXT.replace("(rowid, body, scope, prev, date)", "(rowid, body, scope, prev, date, facts)")
                    + f", mate_search_spaced({FACTS_OF})")


def fact_triggers(searched: str) -> tuple[str, ...]:
    """A fact linked to a message, or unlinked, indexes the message again."""
    return tuple(
        f"""CREATE TRIGGER IF NOT EXISTS tr_search_fact_{event.lower()} AFTER {event} ON mate_message_fact BEGIN
            DELETE FROM mate_search_text WHERE rowid = {row}.message_id * 2;
            {MESSAGE_TEXT_V18.format(r="x")} FROM mate_message x WHERE x.id = {row}.message_id
                AND {searched.format(r="x")};
        END"""
        for event, row in (("INSERT", "NEW"), ("DELETE", "OLD")))
