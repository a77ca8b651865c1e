"""Version 6: full-text search over messages and workspace files (unicode61 + trigram), kept by triggers."""

from __future__ import annotations

from bot.storage.search_schema import FILE_TEXT_V6, FILE_TRIGRAM_V6, MESSAGE_TEXT_V6, MESSAGE_TRIGRAM_V6, SEARCHED_MESSAGE, search_triggers

VERSION = 6
DESCRIPTION = "full-text search over messages and workspace files (unicode61 + trigram), kept by triggers"
STATEMENTS: tuple[str, ...] = (
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
        )
