"""Version 3: mate_message.content_format says whether content is text or a JSON block array."""

from __future__ import annotations

VERSION = 3
DESCRIPTION = "mate_message.content_format says whether content is text or a JSON block array"
STATEMENTS: tuple[str, ...] = (
            """ALTER TABLE mate_message ADD COLUMN content_format TEXT NOT NULL DEFAULT 'text'
                CHECK (content_format IN ('text', 'blocks'))""",
            # Earlier rows were told apart by their text; only what this program itself wrote
            # counts as blocks: tool turns, and assistant turns in its compact encoding (no
            # space after the colon) made only of block types the Messages API sends.
            """UPDATE mate_message SET content_format = 'blocks'
                WHERE role = 'tool'
                   OR (role = 'assistant' AND substr(content, 1, 9) = '[{"type":'
                       AND substr(content, 10, 1) = '"' AND json_valid(content)
                       AND json_type(content) = 'array'
                       AND NOT EXISTS (SELECT 1 FROM json_each(mate_message.content) AS b
                                       WHERE json_type(b.value) <> 'object'
                                          OR json_extract(b.value, '$.type') NOT IN
                                             ('text', 'tool_use', 'thinking', 'redacted_thinking')))""",
        )
