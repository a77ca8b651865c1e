"""In-process fake of Discord's REST API and gateway that a real discord.py client can log in to."""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from collections import deque
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, Awaitable, Callable

from aiohttp import WSMsgType, web

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


class FakeDiscord:
    """A scriptable Discord REST + gateway server on 127.0.0.1 with a random port."""

    application_id: str = "900"
    heartbeat_interval_ms: int = 41250

    def __init__(self) -> None:
        self.bot_user: dict[str, Any] = {**_user(self.application_id, "mate", bot=True), "verified": True, "flags": 0}
        self.text_channel: dict[str, Any] = {
            "id": "200",
            "type": 0,
            "guild_id": "100",
            "name": "general",
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "flags": 0,
        }
        self.guild: dict[str, Any] = {
            "id": "100",
            "name": "Test",
            "icon": None,
            "owner_id": "1",
            "unavailable": False,
            "large": False,
            "member_count": 1,  # just the bot, so discord.py counts the guild as chunked
            "joined_at": _now(),
            "features": [],
            "preferred_locale": "en-US",
            "roles": [
                {
                    "id": "100",  # @everyone shares the guild id
                    "name": "@everyone",
                    "permissions": str(_EVERYONE_PERMISSIONS),
                    "position": 0,
                    "color": 0,
                    "hoist": False,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                }
            ],
            "emojis": [],
            "stickers": [],
            "channels": [self.text_channel],
            "threads": [],
            "members": [_member(self.bot_user)],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }
        self.api_base = ""
        self.gateway_url = ""
        self.rest_calls: list[tuple[str, str, Any]] = []  # (method, path under /api/v10, JSON body)
        self.sent_messages: list[dict[str, Any]] = []
        self.edited_messages: list[dict[str, Any]] = []
        self.interaction_responses: list[dict[str, Any]] = []
        self.followups: list[dict[str, Any]] = []
        self.typing_calls: list[str] = []
        self.registered_commands: list[dict[str, Any]] = []
        self.identify: dict[str, Any] | None = None
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.gateway_queries: list[dict[str, str]] = []
        self.server_errors: list[Exception] = []
        self.session_id: str | None = None
        self._ids = itertools.count()
        self._messages: dict[str, dict[str, Any]] = {}
        self._dm_channels: dict[str, str] = {"42": "300"}
        self._interactions: dict[str, dict[str, Any]] = {}  # by id, and by token for webhooks
        self._answered: set[str] = set()
        self._originals: dict[str, dict[str, Any]] = {}  # interaction token -> response message
        self._command_ids: dict[tuple[str, str | None], str] = {}
        self._post_failures: deque[tuple[int, dict[str, Any], dict[str, str]]] = deque()
        self._seq = 0
        self._ws: web.WebSocketResponse | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        self._send_lock = asyncio.Lock()
        self._ready = asyncio.Event()
        # Set while a session is live, so dispatch() can ride out a reconnect instead of failing.
        self._live = asyncio.Event()
        # Replaced on every change so waiters wake and re-check their predicate.
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> FakeDiscord:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/gateway/", self._gateway)
        app.router.add_get("/gateway", self._gateway)
        api = "/api/v10"
        routes: list[tuple[str, str, Handler]] = [
            ("GET", "/users/@me", self._me),
            ("GET", "/oauth2/applications/@me", self._app_info),
            ("GET", "/gateway", self._gateway_bot),
            ("GET", "/gateway/bot", self._gateway_bot),
            ("POST", "/users/@me/channels", self._open_dm),
            ("GET", "/channels/{channel_id}", self._get_channel),
            ("POST", "/channels/{channel_id}/messages", self._create_message),
            ("GET", "/channels/{channel_id}/messages/{message_id}", self._get_message),
            ("PATCH", "/channels/{channel_id}/messages/{message_id}", self._edit_message),
            ("DELETE", "/channels/{channel_id}/messages/{message_id}", self._no_content),
            ("PUT", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", self._no_content),
            ("DELETE", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", self._no_content),
            ("POST", "/channels/{channel_id}/typing", self._typing),
            ("GET", "/applications/{app_id}/commands", self._list_commands),
            ("PUT", "/applications/{app_id}/commands", self._put_commands),
            ("GET", "/applications/{app_id}/guilds/{guild_id}/commands", self._list_commands),
            ("PUT", "/applications/{app_id}/guilds/{guild_id}/commands", self._put_commands),
            ("POST", "/interactions/{interaction_id}/{token}/callback", self._interaction_callback),
            ("POST", "/webhooks/{app_id}/{token}", self._followup),
            ("GET", "/webhooks/{app_id}/{token}/messages/{message_id}", self._get_webhook_message),
            ("PATCH", "/webhooks/{app_id}/{token}/messages/{message_id}", self._edit_webhook_message),
            ("DELETE", "/webhooks/{app_id}/{token}/messages/{message_id}", self._no_content),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, api + path, handler)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.api_base = f"http://127.0.0.1:{port}{api}"
        self.gateway_url = f"ws://127.0.0.1:{port}/gateway/"
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._live.clear()
        for ws in list(self._sockets):
            await ws.close(code=1001)  # "going away", in case a test left its client running
        if self._runner is not None:
            await self._runner.cleanup()
        if self.server_errors and exc_type is None:
            raise AssertionError(f"FakeDiscord handlers crashed: {self.server_errors!r}")

    # -- scripting helpers -------------------------------------------------------------------

    async def wait_ready(self, timeout: float = 5) -> None:
        """Wait until IDENTIFY arrived and READY + GUILD_CREATE went out."""
        async with asyncio.timeout(timeout):
            await self._ready.wait()

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a DISPATCH (op 0) on the live session, waiting out a reconnect if one is underway."""
        async with asyncio.timeout(5):
            await self._live.wait()
        assert self._ws is not None
        await self._dispatch_to(self._ws, event, data)

    async def send_guild_message(
        self,
        content: str,
        *,
        channel_id: str = "200",
        author_id: str = "42",
        username: str = "alice",
        mention_bot: bool = False,
        message_id: str | None = None,
    ) -> dict[str, Any]:
        """MESSAGE_CREATE in a guild channel; mention_bot prepends "<@900> " like a real client would."""
        bot_id = self.bot_user["id"]
        mentioned = mention_bot or f"<@{bot_id}>" in content or f"<@!{bot_id}>" in content
        if mention_bot and f"<@{bot_id}>" not in content and f"<@!{bot_id}>" not in content:
            content = f"<@{bot_id}> {content}"
        payload = self._incoming(content, channel_id, _user(author_id, username), message_id)
        payload["guild_id"] = self.guild["id"]
        payload["member"] = _member()
        if mentioned:
            payload["mentions"] = [{**self.bot_user, "member": _member()}]
        elif not self._intents() & MESSAGE_CONTENT_INTENT:
            # Discord withholds these fields from bots without the privileged intent.
            payload.update(content="", embeds=[], attachments=[], components=[])
        await self.dispatch("MESSAGE_CREATE", payload)
        return payload

    async def send_dm(self, content: str, *, author_id: str = "42", username: str = "alice") -> dict[str, Any]:
        """MESSAGE_CREATE in the author's DM channel ("300" for the default user); DMs always carry content."""
        channel_id = self._dm_channel(author_id)
        payload = self._incoming(content, channel_id, _user(author_id, username), None)
        await self.dispatch("MESSAGE_CREATE", payload)
        return payload

    async def send_slash_command(
        self,
        name: str,
        *,
        options: list[dict[str, Any]] | None = None,
        subcommand: str | None = None,
        channel_id: str = "200",
        user_id: str = "42",
        username: str = "alice",
        in_dm: bool = False,
    ) -> dict[str, Any]:
        """INTERACTION_CREATE (type 2) for a chat-input command, shaped like Discord's own payload."""
        opts = list(options or [])
        if subcommand is not None:
            opts = [{"type": 1, "name": subcommand, "options": opts}]
        guild_id = None if in_dm else self.guild["id"]
        command = next(
            (c for c in self.registered_commands if c["name"] == name and c.get("guild_id") in (guild_id, None)),
            None,
        )
        data: dict[str, Any] = {
            "id": command["id"] if command else self._snowflake(),
            "name": name,
            "type": 1,
            "options": opts,
        }
        if command is not None and command.get("guild_id"):
            data["guild_id"] = command["guild_id"]  # the tree looks guild commands up by this key
        user = _user(user_id, username)
        interaction: dict[str, Any] = {
            "id": self._snowflake(),
            "application_id": self.application_id,
            "type": 2,
            "data": data,
            "token": secrets.token_urlsafe(24),
            "version": 1,
            "app_permissions": str(_EVERYONE_PERMISSIONS),
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        if in_dm:
            dm = self._dm_channel(user_id)
            interaction.update(
                channel_id=dm,
                channel={"id": dm, "type": 1, "recipients": [user], "last_message_id": None, "flags": 0},
                user=user,
                context=1,
                authorizing_integration_owners={"0": "0"},
            )
        else:
            channel = next((c for c in self.guild["channels"] if c["id"] == channel_id), None)
            if channel is None:
                raise ValueError(f"no channel {channel_id!r} in the fake guild")
            interaction.update(
                guild_id=guild_id,
                guild={"id": guild_id, "locale": "en-US", "features": []},
                guild_locale="en-US",
                channel_id=channel_id,
                channel=channel,
                member={**_member(user), "permissions": str(_EVERYONE_PERMISSIONS)},
                context=0,
                authorizing_integration_owners={"0": guild_id},
            )
        self._interactions[interaction["id"]] = interaction
        self._interactions[interaction["token"]] = interaction
        await self.dispatch("INTERACTION_CREATE", interaction)
        return interaction

    async def wait_for(
        self, what: str | Callable[[], bool], count: int = 1, timeout: float = 5.0
    ) -> list[dict[str, Any]]:
        """Wait until list attribute `what` has `count` items (returning a copy) or predicate `what` holds."""
        items: list[Any] = getattr(self, what) if isinstance(what, str) else []

        def done() -> bool:
            return len(items) >= count if isinstance(what, str) else what()

        try:
            async with asyncio.timeout(timeout):
                while not done():
                    await self._changed.wait()
        except TimeoutError:
            have = f" (have {len(items)})" if isinstance(what, str) else ""
            raise TimeoutError(f"FakeDiscord: timed out waiting for {what!r}{have}") from None
        return list(items)

    async def wait_sent(self, count: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
        return await self.wait_for("sent_messages", count, timeout)

    async def wait_interaction_responses(self, count: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
        return await self.wait_for("interaction_responses", count, timeout)

    async def wait_followups(self, count: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
        return await self.wait_for("followups", count, timeout)

    def fail_next_post(
        self, status: int, body: dict[str, Any], *, via: bool = True, retry_after: float = 0.0
    ) -> None:
        """Make the next POST /channels/{id}/messages fail; calls queue up in order."""
        body = dict(body)
        headers: dict[str, str] = {}
        if via:
            headers["Via"] = "1.1 google"  # discord.py treats a 429 without Via as a Cloudflare ban
        if status == 429:
            body.setdefault("retry_after", retry_after)
            body.setdefault("global", False)
            headers["Retry-After"] = str(retry_after)
        self._post_failures.append((status, body, headers))

    async def drop_gateway(self, code: int = 4000, *, resumable: bool = True) -> None:
        """Close the live websocket from the server side; the client reconnects and RESUMEs.

        With resumable=False the session is forgotten, so the RESUME gets op 9 (invalid session)
        and the client re-IDENTIFYs, which discord.py delays by 5 s via Client.before_identify_hook.
        """
        ws = self._ws
        self._live.clear()
        self._ws = None
        if not resumable:
            self.session_id = None
        if ws is not None:
            await ws.close(code=code)

    # -- gateway ---------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        # compress=False: the client asks for zlib-stream in the query, but it only inflates
        # binary frames, so plain text frames are always understood.
        ws = web.WebSocketResponse(compress=False, timeout=2.0)
        await ws.prepare(request)
        self.gateway_queries.append(dict(request.query))
        self._sockets.add(ws)
        try:
            await self._send(ws, {"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    await self._on_frame(ws, json.loads(msg.data))
        finally:
            self._sockets.discard(ws)
            if self._ws is ws:
                self._ws = None
                self._live.clear()
            self._notify()
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        op, data = frame.get("op"), frame.get("d")
        if op == 1:
            await self._send(ws, {"op": 11})
        elif op == 2:
            await self._on_identify(ws, data)
        elif op == 6:
            await self._on_resume(ws, data)
        elif op == 8:
            # Only sent when the members intent makes the client chunk guilds; answer with "nobody".
            chunk = {"guild_id": data["guild_id"], "members": [], "chunk_index": 0, "chunk_count": 1}
            await self._dispatch_to(ws, "GUILD_MEMBERS_CHUNK", {**chunk, "not_found": [], "nonce": data.get("nonce")})

    async def _on_identify(self, ws: web.WebSocketResponse, data: dict[str, Any]) -> None:
        self.identify = data
        self.identifies.append(data)
        self.session_id = secrets.token_hex(16)
        self._seq = 0
        self._ws = ws
        ready = {
            "v": 10,
            "user": self.bot_user,
            "guilds": [{"id": self.guild["id"], "unavailable": True}],
            "session_id": self.session_id,
            "resume_gateway_url": self.gateway_url,
            "session_type": "normal",
            "application": {"id": self.application_id, "flags": 0},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "user_settings": {},
            "geo_ordered_rtc_regions": [],
            "guild_join_requests": [],
            "auth": {},
            "_trace": ["fake-discord"],
        }
        if "shard" in data:
            ready["shard"] = data["shard"]
        await self._dispatch_to(ws, "READY", ready)
        await self._dispatch_to(ws, "GUILD_CREATE", self.guild)
        self._ready.set()
        self._live.set()
        self._notify()

    async def _on_resume(self, ws: web.WebSocketResponse, data: dict[str, Any]) -> None:
        self.resumes.append(data)
        if self.session_id is None or data.get("session_id") != self.session_id:
            await self._send(ws, {"op": 9, "d": False})  # invalid session: the client re-identifies
            self._notify()
            return
        self._ws = ws
        await self._dispatch_to(ws, "RESUMED", {"_trace": ["fake-discord"]})
        self._live.set()
        self._notify()

    async def _dispatch_to(self, ws: web.WebSocketResponse, event: str, data: dict[str, Any]) -> None:
        # One lock so sequence numbers go out in order even when tests and the reader both send.
        async with self._send_lock:
            self._seq += 1
            await ws.send_str(json.dumps({"op": 0, "s": self._seq, "t": event, "d": data}))

    async def _send(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        async with self._send_lock:
            await ws.send_str(json.dumps({"s": None, "t": None, "d": None, **frame}))

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

    def _dm_channel(self, user_id: str) -> str:
        if user_id not in self._dm_channels:
            self._dm_channels[user_id] = str(300 + len(self._dm_channels))
        return self._dm_channels[user_id]

    def _intents(self) -> int:
        return int((self.identify or {}).get("intents", 0))

    def _snowflake(self) -> str:
        """Time-ordered ids like Discord's, so discord.py's created_at values look sane."""
        millis = int(time.time() * 1000) - _DISCORD_EPOCH_MS
        return str((millis << 22) | (next(self._ids) & 0xFFF))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
