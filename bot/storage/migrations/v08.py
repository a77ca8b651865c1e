"""Version 8: the word index also holds each message's previous turn and its date in words."""

from __future__ import annotations

from bot.storage.search_schema import FILE_TEXT, FILE_TRIGRAM, MESSAGE_TEXT, MESSAGE_TRIGRAM, SEARCHED_MESSAGE, TRIGGERS, search_triggers

VERSION = 8
DESCRIPTION = "the word index also holds each message's previous turn and its date in words"
STATEMENTS: tuple[str, ...] = (
            *(f"DROP TRIGGER IF EXISTS {name}" for name in TRIGGERS),
            "DROP TABLE IF EXISTS mate_search_text",
            """CREATE VIRTUAL TABLE mate_search_text USING fts5(
                body, scope, prev, date, tokenize = 'porter unicode61 remove_diacritics 2')""",
            *search_triggers(MESSAGE_TEXT, FILE_TEXT, MESSAGE_TRIGRAM, FILE_TRIGRAM, follow_next=True),
            f"{MESSAGE_TEXT.format(r='m')} FROM mate_message m WHERE {SEARCHED_MESSAGE.format(r='m')}",
            f"{FILE_TEXT.format(r='f')} FROM mate_workspace_file f WHERE f.deleted = 0",
        )
