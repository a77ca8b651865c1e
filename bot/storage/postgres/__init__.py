"""PostgreSQL behind the same repositories as SQLite: several daemons on one database."""
