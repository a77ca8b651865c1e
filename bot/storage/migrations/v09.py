"""Version 9: mate_embedding: one vector per searched message or workspace file and model, for semantic search."""

from __future__ import annotations

VERSION = 9
DESCRIPTION = (
    "mate_embedding: one vector per searched message or workspace file and model, for semantic "
    "search"
)
STATEMENTS: tuple[str, ...] = (
            # key: the search index rowid (message id * 2, workspace file id * 2 + 1). The vector
            # is quantized to one byte per dimension (value + 128, scaled per vector): a quarter
            # of float32's size, and what the search compares. dim 0: the endpoint refused the
            # text, so it is not asked again.
            """CREATE TABLE IF NOT EXISTS mate_embedding (
                key INTEGER NOT NULL,
                model TEXT NOT NULL,
                agent_id INTEGER NOT NULL,
                dim INTEGER NOT NULL,
                vector BLOB NOT NULL,
                norm REAL NOT NULL,
                create_time TEXT NOT NULL,
                PRIMARY KEY (key, model)
            )""",
            "CREATE INDEX IF NOT EXISTS ix_embedding_agent ON mate_embedding(agent_id, model)",
            # A changed or removed text loses its vector; the background backfill makes it again.
            """CREATE TRIGGER IF NOT EXISTS tr_embedding_message_update
                AFTER UPDATE OF content, role, content_format ON mate_message BEGIN
                DELETE FROM mate_embedding WHERE key = OLD.id * 2;
            END""",
            """CREATE TRIGGER IF NOT EXISTS tr_embedding_message_delete AFTER DELETE ON mate_message BEGIN
                DELETE FROM mate_embedding WHERE key = OLD.id * 2;
            END""",
            """CREATE TRIGGER IF NOT EXISTS tr_embedding_file_update
                AFTER UPDATE OF content, filename, deleted, agent_id ON mate_workspace_file BEGIN
                DELETE FROM mate_embedding WHERE key = OLD.id * 2 + 1;
            END""",
            """CREATE TRIGGER IF NOT EXISTS tr_embedding_file_delete AFTER DELETE ON mate_workspace_file BEGIN
                DELETE FROM mate_embedding WHERE key = OLD.id * 2 + 1;
            END""",
        )
