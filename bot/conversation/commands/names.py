"""The slash commands every channel knows, and how to tell one from text that starts with "/"."""

from __future__ import annotations

COMMANDS: tuple[tuple[str, str], ...] = (
    ("help", "Show the commands"),
    ("new", "Start a fresh conversation"),
    ("compact", "Summarise the conversation so far"),
    ("status", "Agent, model, context and memory status"),
    ("whoami", "Who the bot takes you for, and which agent answers"),
    ("tasks", "This chat's reminders | cancel <id>"),
    ("memory", "emerge | summarize | show | history | why <text> | approve | reject"),
    ("undo", "Take back what memory kept from this chat's last exchange"),
    ("incognito", "on | off: talk without anything being remembered"),
)
_KNOWN = frozenset({name for name, _ in COMMANDS} | {"start"})  # Telegram's /start


def command_name(text: str) -> str | None:
    """The known command `text` starts with ("/status@mybot ..." -> "status"), else None.

    "/etc/hosts is empty, why?" is a question, not a command: it goes to the model.
    """
    first = text.lstrip().split(maxsplit=1)[0] if text.strip() else ""
    if not first.startswith("/"):
        return None
    name = first[1:].split("@", 1)[0].lower()
    return name if name in _KNOWN else None
