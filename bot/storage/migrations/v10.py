"""Version 10: people: one row per person, and the channel accounts that are that person."""

from __future__ import annotations

VERSION = 10
DESCRIPTION = "people: one row per person, and the channel accounts that are that person"
STATEMENTS: tuple[str, ...] = (
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
        )
