"""One service per user-facing feature, called by every door: the chat commands (through the
ports bot/conversation/commands owns), the HTTP API and the CLI. A door keeps only its own
presentation: chat text, a JSON shape, a CLI table."""
