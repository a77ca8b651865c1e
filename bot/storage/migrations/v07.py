"""Version 7: the substring index is scoped per agent, so a substring search reads only its agent's rows."""

from __future__ import annotations

from bot.storage.search_schema import FILE_TEXT_V6, FILE_TRIGRAM, MESSAGE_TEXT_V6, MESSAGE_TRIGRAM, SEARCHED_MESSAGE, TRIGGERS, search_triggers

VERSION = 7
DESCRIPTION = "the substring index is scoped per agent, so a substring search reads only its agent's rows"
STATEMENTS: tuple[str, ...] = (
            *(f"DROP TRIGGER IF EXISTS {name}" for name in TRIGGERS),
            "DROP TABLE IF EXISTS mate_search_trigram",
            """CREATE VIRTUAL TABLE mate_search_trigram USING fts5(
                body, scope, source UNINDEXED, agent_id UNINDEXED, conversation_id UNINDEXED, ref_id UNINDEXED,
                filename UNINDEXED, time UNINDEXED, tokenize = 'trigram')""",
            *search_triggers(MESSAGE_TEXT_V6, FILE_TEXT_V6, MESSAGE_TRIGRAM, FILE_TRIGRAM),
            f"{MESSAGE_TRIGRAM.format(r='m')} FROM mate_message m WHERE {SEARCHED_MESSAGE.format(r='m')}",
            f"{FILE_TRIGRAM.format(r='f')} FROM mate_workspace_file f WHERE f.deleted = 0",
        )
