"""Version 18: facts an extraction took from a message are indexed with it (mate_message_fact)."""

from __future__ import annotations

from bot.storage.remembered import NOT_INCOGNITO
from bot.storage.search_schema import (
    FILE_TEXT,
    FILE_TRIGRAM,
    MESSAGE_TEXT_V18,
    MESSAGE_TRIGRAM,
    SEARCHED_MESSAGE,
    fact_triggers,
    search_triggers,
)

VERSION = 18
DESCRIPTION = "the facts an extraction took from a message are found with it (mate_message_fact)"
_SEARCHED = SEARCHED_MESSAGE + " AND " + NOT_INCOGNITO.format(m="{r}")
STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS mate_message_fact (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id INTEGER NOT NULL REFERENCES mate_message(id) ON DELETE CASCADE,
        fact TEXT NOT NULL,
        run_id INTEGER,
        create_time TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS ix_message_fact_message ON mate_message_fact(message_id)",
    "CREATE INDEX IF NOT EXISTS ix_message_fact_run ON mate_message_fact(run_id)",
    # The word index gains a column: its rows are copied, not computed again (a turn's previous
    # turn is a subquery per row).
    "CREATE TEMP TABLE mate_search_text_rows AS SELECT rowid AS key, body, scope, prev, date FROM mate_search_text",
    "DROP TABLE mate_search_text",
    """CREATE VIRTUAL TABLE mate_search_text USING fts5(
        body, scope, prev, date, facts, tokenize = 'porter unicode61 remove_diacritics 2')""",
    "INSERT INTO mate_search_text(rowid, body, scope, prev, date) "
    "SELECT key, body, scope, prev, date FROM temp.mate_search_text_rows",
    "DROP TABLE temp.mate_search_text_rows",
    *(f"DROP TRIGGER IF EXISTS {name}" for name in
      ("tr_search_message_insert", "tr_search_message_update", "tr_search_message_delete")),
    *search_triggers(MESSAGE_TEXT_V18, FILE_TEXT, MESSAGE_TRIGRAM, FILE_TRIGRAM, follow_next=True,
                     searched=_SEARCHED)[:3],
    *fact_triggers(_SEARCHED),
)
