"""The Bot API wire as the fake Telegram reads and writes it: request parameters, message content, answers."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.support.fakes.telegram_html import parse_html

# Telegram types these parameters as free text; everything else PTB sends as a JSON string.
_TEXT_FIELDS = frozenset(
    {
        "text", "caption", "parse_mode", "action", "title", "description", "short_description",
        "name", "language_code", "emoji", "query", "question", "explanation", "url",
        "inline_message_id", "callback_query_id", "business_connection_id", "first_name",
        "last_name", "phone_number", "address", "message_effect_id", "secret_token",
        "file_id", "sticker", "photo", "document", "audio", "video", "voice", "animation",
    }
)  # fmt: skip

MAX_TEXT_LENGTH = 4096  # characters after entity parsing
NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are exactly the "
    "same as a current content and reply markup of the message"
)


def decode_param(key: str, value: Any) -> Any:
    """Turn one wire value back into the Python value the client meant."""
    if not isinstance(value, str):
        return value  # JSON bodies already carry their types
    if key in _TEXT_FIELDS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value  # e.g. chat_id="@channel" or an opaque file id


async def read_params(request: web.Request) -> dict[str, Any]:
    """A request's parameters (query, JSON body or form), decoded to what the client meant."""
    raw: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        body = await request.json() if request.can_read_body else {}
        raw.update(body or {})
    elif request.can_read_body:
        for key, value in (await request.post()).items():
            if isinstance(value, web.FileField):
                raw[key] = {
                    "filename": value.filename,
                    "content_type": value.content_type,
                    "data": value.file.read(),
                }
            else:
                raw[key] = value
    params = {key: decode_param(key, value) for key, value in raw.items()}
    if isinstance(params.get("chat_id"), str) and params["chat_id"].lstrip("-").isdigit():
        params["chat_id"] = int(params["chat_id"])
    return params


def api_reply(payload: dict[str, Any]) -> web.Response:
    """A Bot API answer, with the HTTP status of its error_code when it is an error."""
    status = 200 if payload["ok"] else int(payload["error_code"])
    return web.json_response(payload, status=status)


def update_id_of(entry: Any) -> int | None:
    """The entry's update_id when it is an integer (what an offset can confirm)."""
    update_id = entry.get("update_id") if isinstance(entry, dict) else None
    return update_id if type(update_id) is int else None


def inline_markup(params: dict[str, Any]) -> dict[str, Any] | None:
    """The inline keyboard a message carries; other keyboards are not part of the message."""
    markup = params.get("reply_markup")
    return markup if isinstance(markup, dict) and "inline_keyboard" in markup else None


def message_content(params: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The text and entities a user sees: explicit entities win, else HTML parse mode is parsed.

    Markdown modes are not parsed: their text is kept as sent, without entities.
    """
    text = str(params.get("text") or "")
    if params.get("entities"):
        return text, list(params["entities"])
    if str(params.get("parse_mode") or "").lower() == "html":
        return parse_html(text)
    return text, []

