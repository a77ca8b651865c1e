"""Version 2: conversation message_count and update_time kept by a trigger."""

from __future__ import annotations

VERSION = 2
DESCRIPTION = "conversation message_count and update_time kept by a trigger"
STATEMENTS: tuple[str, ...] = (
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
        )
