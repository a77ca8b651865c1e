"""The REST half of the fake Discord server: the routes a discord.py client calls."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.support.fakes.discord_payloads import (
    _BODY,
    _EPHEMERAL,
    _LOADING,
    JSON_TYPE,
    Handler,
    _body,
    _error,
    _json,
    _now,
    _user,
)


class DiscordRestRoutes:
    """Mixed into FakeDiscord, whose state (messages, commands, recordings) these handlers use."""

    # -- REST ------------------------------------------------------------------------------

    @web.middleware
    async def _record(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        body: Any = None
        if request.content_type == JSON_TYPE:
            body = await request.json()
        elif request.content_type == "multipart/form-data":
            # Uploads carry the JSON body in payload_json; file parts are reduced to their names.
            form = await request.post()
            body = json.loads(str(form["payload_json"])) if "payload_json" in form else {}
            body["files"] = [f.filename for f in form.values() if isinstance(f, web.FileField)]
        request[_BODY] = body
        if request.path.startswith("/api/v10/"):
            self.rest_calls.append((request.method, request.path.removeprefix("/api/v10"), body))
            self._notify()
        try:
            return await handler(request)
        except Exception as exc:
            # discord.py quietly retries a 500 after a second; keep the fake's own bugs loud.
            self.server_errors.append(exc)
            raise

    async def _me(self, request: web.Request) -> web.Response:
        if self.reject_token:
            return _error(401, "401: Unauthorized")
        return _json(self.bot_user)

    async def _app_info(self, request: web.Request) -> web.Response:
        return _json(self._application())

    async def _unknown(self, request: web.Request) -> web.Response:
        return _error(404, "Unknown")

    async def _no_content(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
        return _json({"url": self.gateway_url, "shards": 1, "session_start_limit": limit})

    async def _open_dm(self, request: web.Request) -> web.Response:
        recipient = str(_body(request)["recipient_id"])
        user = _user(recipient, f"user{recipient}")
        return _json({"id": self._dm_channel(recipient), "type": 1, "recipients": [user], "last_message_id": None})

    async def _get_channel(self, request: web.Request) -> web.Response:
        channel_id = request.match_info["channel_id"]
        for channel in self.guild["channels"]:
            if channel["id"] == channel_id:
                return _json(channel)
        for user_id, dm in self._dm_channels.items():
            if dm == channel_id:
                return _json({"id": dm, "type": 1, "recipients": [_user(user_id, f"user{user_id}")]})
        return _error(404, "Unknown Channel", 10003)

    async def _create_message(self, request: web.Request) -> web.Response:
        if self._post_failures:
            status, body, headers = self._post_failures.popleft()
            return _json(body, status, headers)
        channel_id = request.match_info["channel_id"]
        body = _body(request) or {}
        self.sent_messages.append({**body, "channel_id": channel_id})
        self._notify()
        return _json(self._outgoing(channel_id, body))

    async def _get_message(self, request: web.Request) -> web.Response:
        message = self._messages.get(request.match_info["message_id"])
        return _json(message) if message else _error(404, "Unknown Message", 10008)

    async def _edit_message(self, request: web.Request) -> web.Response:
        message = self._messages.get(request.match_info["message_id"])
        if message is None:
            return _error(404, "Unknown Message", 10008)
        body = _body(request) or {}
        self.edited_messages.append({**body, "channel_id": message["channel_id"], "message_id": message["id"]})
        message.update({k: v for k, v in body.items() if k in ("content", "embeds", "components", "flags")})
        message["edited_timestamp"] = _now()
        self._notify()
        return _json(message)

    async def _typing(self, request: web.Request) -> web.Response:
        self.typing_calls.append(request.match_info["channel_id"])
        self._notify()
        return web.Response(status=204)

    async def _list_commands(self, request: web.Request) -> web.Response:
        scope = request.match_info.get("guild_id")
        return _json([c for c in self.registered_commands if c.get("guild_id") == scope])

    async def _put_commands(self, request: web.Request) -> web.Response:
        """A bulk overwrite: the scope's old commands go, ids stay stable per (name, guild)."""
        scope = request.match_info.get("guild_id")
        created = []
        for payload in _body(request) or []:
            key = (payload["name"], scope)
            command_id = self._command_ids.setdefault(key, self._snowflake())
            command = {
                "type": 1,
                "description": "",
                "options": [],
                "default_member_permissions": None,
                "nsfw": False,
                **payload,
                "id": command_id,
                "application_id": self.application_id,
                "version": command_id,
            }
            if scope is not None:
                command["guild_id"] = scope
            created.append(command)
        self.registered_commands[:] = [c for c in self.registered_commands if c.get("guild_id") != scope] + created
        self._notify()
        return _json(created)

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        interaction_id = request.match_info["interaction_id"]
        interaction = self._interactions.get(interaction_id)
        if interaction is None or interaction["token"] != request.match_info["token"]:
            return _error(404, "Unknown interaction", 10062)
        if interaction_id in self._answered:
            return _error(400, "Interaction has already been acknowledged.", 40060)
        self._answered.add(interaction_id)
        body = _body(request) or {}
        self.interaction_responses.append({**body, "interaction_id": interaction_id})
        self._notify()
        kind = body.get("type")
        data = body.get("data") or {}
        callback: dict[str, Any] = {
            "id": interaction_id,
            "type": interaction["type"],
            "activity_instance_id": None,
            "response_message_id": None,
            "response_message_loading": kind == 5,
            "response_message_ephemeral": bool(data.get("flags", 0) & _EPHEMERAL),
        }
        resource: dict[str, Any] = {"type": kind}
        if kind in (4, 5):  # channel message, or deferred one (a "thinking..." placeholder)
            if kind == 5:
                data = {**data, "flags": data.get("flags", 0) | _LOADING}
            message = self._outgoing(interaction["channel_id"], data, interaction=interaction)
            self._originals[interaction["token"]] = message
            callback["response_message_id"] = message["id"]
            resource["message"] = message
        return _json({"interaction": callback, "resource": resource})

    async def _followup(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        interaction = self._interactions.get(token)
        if interaction is None:
            return _error(404, "Unknown Webhook", 10015)
        body = _body(request) or {}
        self.followups.append({**body, "token": token})
        self._notify()
        return _json(self._outgoing(interaction["channel_id"], body, interaction=interaction))

    async def _get_webhook_message(self, request: web.Request) -> web.Response:
        message = self._webhook_message(request)
        return _json(message) if message else _error(404, "Unknown Message", 10008)

    async def _edit_webhook_message(self, request: web.Request) -> web.Response:
        message = self._webhook_message(request)
        if message is None:
            return _error(404, "Unknown Message", 10008)
        body = _body(request) or {}
        self.edited_messages.append({**body, "channel_id": message["channel_id"], "message_id": message["id"]})
        message.update({k: v for k, v in body.items() if k in ("content", "embeds", "components")})
        message["flags"] = message.get("flags", 0) & ~_LOADING  # editing a deferred reply finishes it
        message["edited_timestamp"] = _now()
        self._notify()
        return _json(message)

    # -- payload builders ------------------------------------------------------------------

    def _application(self) -> dict[str, Any]:
        return {
            "id": self.application_id,
            "name": self.bot_user["username"],
            "description": "",
            "icon": None,
            "bot_public": True,
            "bot_require_code_grant": False,
            "owner": _user("1", "owner"),
            "verify_key": "0" * 64,
            "flags": 0,
            "team": None,
            "bot": self.bot_user,
            "redirect_uris": [],
            "interactions_endpoint_url": None,  # non-null makes discord.py warn it won't see interactions
        }

    def _incoming(
        self, content: str, channel_id: str, author: dict[str, Any], message_id: str | None
    ) -> dict[str, Any]:
        return {
            "id": message_id or self._snowflake(),
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": _now(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }

    def _outgoing(
        self, channel_id: str, body: dict[str, Any], *, interaction: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The message object Discord answers with when the bot posts `body`."""
        message = self._incoming(body.get("content") or "", channel_id, self.bot_user, None)
        message.update(
            tts=bool(body.get("tts")),
            embeds=body.get("embeds") or [],
            components=body.get("components") or [],
            flags=body.get("flags") or 0,
            nonce=body.get("nonce"),
            attachments=[
                {"id": self._snowflake(), "filename": a.get("filename", "file"), "size": 0, "url": "", "proxy_url": ""}
                for a in body.get("attachments") or []
            ],
        )
        if channel_id in {c["id"] for c in self.guild["channels"]}:
            message["guild_id"] = self.guild["id"]
        if body.get("message_reference"):
            message.update(type=19, message_reference=body["message_reference"])
        if interaction is not None:
            message.update(webhook_id=self.application_id, application_id=self.application_id)
        self._messages[message["id"]] = message
        return message

    def _webhook_message(self, request: web.Request) -> dict[str, Any] | None:
        message_id = request.match_info["message_id"]
        if message_id == "@original":
            return self._originals.get(request.match_info["token"])
        return self._messages.get(message_id)
