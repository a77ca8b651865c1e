"""Wire-level pieces shared by the fake Discord server: constants, JSON responses, object shapes."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from aiohttp import web

JSON_TYPE = "application/json"
MESSAGE_CONTENT_INTENT = 1 << 15
_DISCORD_EPOCH_MS = 1420070400000
_EPHEMERAL = 1 << 6
_LOADING = 1 << 7
# view_channel | send_messages | embed_links | attach_files | read_message_history |
# add_reactions | use_application_commands | send_messages_in_threads: enough for a chat bot.
_EVERYONE_PERMISSIONS = (1 << 10) | (1 << 11) | (1 << 14) | (1 << 15) | (1 << 16) | (1 << 6) | (1 << 31) | (1 << 38)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The decoded request body, parsed once by the recording middleware for every handler.
_BODY = web.RequestKey("fake_discord_body", object)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """discord.py only decodes bodies whose Content-Type is exactly application/json (no charset)."""
    return web.Response(
        status=status, body=json.dumps(data).encode(), headers={"Content-Type": JSON_TYPE, **(headers or {})}
    )


def _body(request: web.Request) -> Any:
    """The request's JSON (a list for bulk command PUTs), or None when it had no body."""
    return request[_BODY]


def _error(status: int, message: str, code: int = 0) -> web.Response:
    return _json({"message": message, "code": code}, status)


def _user(user_id: str, username: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": username,
        "discriminator": "0",
        "global_name": username,
        "avatar": None,
        "bot": bot,
        "public_flags": 0,
    }


def _member(user: dict[str, Any] | None = None) -> dict[str, Any]:
    member: dict[str, Any] = {
        "roles": [],
        "joined_at": _now(),
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
        "nick": None,
        "avatar": None,
        "premium_since": None,
        "communication_disabled_until": None,
    }
    if user is not None:
        member["user"] = user
    return member
