"""Version 17: leases (mate_lease), so that several daemons on one database share the work."""

from __future__ import annotations

VERSION = 17
DESCRIPTION = "leases: which daemon polls a bot, answers a chat or runs an agent's memory work (mate_lease)"
STATEMENTS: tuple[str, ...] = (
    # A row is held by one daemon until expires_time; its holder renews it, any other takes it
    # over once it has expired. One daemon on SQLite holds them all.
    """CREATE TABLE IF NOT EXISTS mate_lease (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_time TEXT NOT NULL
    )""",
)
