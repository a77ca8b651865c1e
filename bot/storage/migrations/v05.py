"""Version 5: mate_llm_usage: the tokens each model call was billed, for /status and cost checks."""

from __future__ import annotations

VERSION = 5
DESCRIPTION = "mate_llm_usage: the tokens each model call was billed, for /status and cost checks"
STATEMENTS: tuple[str, ...] = (
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
        )
