"""Version 1: initial schema."""

from __future__ import annotations

VERSION = 1
DESCRIPTION = "initial schema"
STATEMENTS: tuple[str, ...] = (
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
        )
