"""Version 4: mate_message.external_id: the platform's message id, so a redelivered message is answered once."""

from __future__ import annotations

VERSION = 4
DESCRIPTION = (
    "mate_message.external_id: the platform's message id, so a redelivered message is answered "
    "once"
)
STATEMENTS: tuple[str, ...] = (
            "ALTER TABLE mate_message ADD COLUMN external_id TEXT",
            """CREATE INDEX IF NOT EXISTS ix_message_external ON mate_message(conversation_id, external_id)
                WHERE external_id IS NOT NULL""",
            # Start-up recovery looks for recent user messages left without a reply.
            "CREATE INDEX IF NOT EXISTS ix_conversation_update ON mate_conversation(update_time)",
        )
