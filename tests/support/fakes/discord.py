"""In-process fake of Discord's REST API and gateway that a real discord.py client can log in to."""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import json
import secrets
import time
from collections import deque
from types import TracebackType
from typing import Any, Callable

from aiohttp import WSMsgType, web

from tests.support.fakes.discord_payloads import (
    _DISCORD_EPOCH_MS,
    _EVERYONE_PERMISSIONS,
    MESSAGE_CONTENT_INTENT,
    Handler,
    _member,
    _now,
    _user,
)
from tests.support.fakes.discord_network import LoopbackListener
from tests.support.fakes.discord_rest import DiscordRestRoutes

VOICE_MESSAGE_FLAG = 1 << 13  # a message's IS_VOICE_MESSAGE flag


class FakeDiscord(DiscordRestRoutes):
    """A scriptable Discord REST + gateway server on 127.0.0.1 with a random port.

    With listening=False the port is reserved but refuses connections until start_listening();
    drop_network() and restore_network() script an outage while a client is connected.
    """

    application_id: str = "900"
    heartbeat_interval_ms: int = 41250

    def __init__(self, *, listening: bool = True) -> None:
        self._listen_at_start = listening
        self._attachment_bytes: dict[str, bytes] = {}
        self.downloads: list[str] = []  # attachment file names fetched from the fake CDN
        # GET /users/@me answers 401, as Discord does for a revoked or mistyped bot token.
        self.reject_token = False
        # An IDENTIFY asking for the message content intent is closed with 4014, as Discord does
        # when the intent is not enabled in the Developer Portal.
        self.refuse_intents = False
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
        self._listener: LoopbackListener | None = None

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
        app.router.add_get("/attachments/{attachment_id}/{filename}", self._attachment)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        self._listener = LoopbackListener(self._runner)
        if self._listen_at_start:
            await self._listener.listen()
        port = self._listener.port
        self.api_base = f"http://127.0.0.1:{port}{api}"
        self.cdn_base = f"http://127.0.0.1:{port}/attachments"
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
        if self._listener is not None:
            self._listener.close()
        if self.server_errors and exc_type is None:
            raise AssertionError(f"FakeDiscord handlers crashed: {self.server_errors!r}")

    # -- network -----------------------------------------------------------------------------

    @property
    def network_up(self) -> bool:
        return self._listener is not None and self._listener.up

    async def start_listening(self) -> None:
        """Discord becomes reachable: REST and the gateway accept connections from now on."""
        assert self._listener is not None, "use FakeDiscord as an async context manager"
        await self._listener.listen()
        self._notify()

    async def drop_network(self) -> None:
        """Discord becomes unreachable: open connections (websockets, kept-alive REST) are aborted
        without a close frame and new ones are refused, until restore_network()."""
        assert self._listener is not None, "use FakeDiscord as an async context manager"
        self._live.clear()
        self._ws = None
        await self._listener.cut()
        self._notify()

    async def restore_network(self) -> None:
        await self.start_listening()

    # -- scripting helpers -------------------------------------------------------------------

    async def wait_ready(self, timeout: float = 30) -> None:
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
        attachments: tuple[tuple[str, str, bytes], ...] = (),
    ) -> dict[str, Any]:
        """MESSAGE_CREATE in a guild channel; mention_bot prepends "<@900> " like a real client would.

        `attachments`: (filename, content type, bytes), served from the fake CDN."""
        bot_id = self.bot_user["id"]
        mentioned = mention_bot or f"<@{bot_id}>" in content or f"<@!{bot_id}>" in content
        if mention_bot and f"<@{bot_id}>" not in content and f"<@!{bot_id}>" not in content:
            content = f"<@{bot_id}> {content}"
        payload = self._incoming(content, channel_id, _user(author_id, username), message_id)
        payload["attachments"] = [self._attachment_payload(*item) for item in attachments]
        payload["guild_id"] = self.guild["id"]
        payload["member"] = _member()
        if mentioned:
            payload["mentions"] = [{**self.bot_user, "member": _member()}]
        elif not self._intents() & MESSAGE_CONTENT_INTENT:
            # Discord withholds these fields from bots without the privileged intent.
            payload.update(content="", embeds=[], attachments=[], components=[])
        await self.dispatch("MESSAGE_CREATE", payload)
        return payload

    async def send_dm(self, content: str, *, author_id: str = "42", username: str = "alice",
                      attachments: tuple[tuple[str, str, bytes], ...] = ()) -> dict[str, Any]:
        """MESSAGE_CREATE in the author's DM channel ("300" for the default user); DMs always carry content."""
        channel_id = self._dm_channel(author_id)
        payload = self._incoming(content, channel_id, _user(author_id, username), None)
        payload["attachments"] = [self._attachment_payload(*item) for item in attachments]
        await self.dispatch("MESSAGE_CREATE", payload)
        return payload

    async def send_voice_message(self, data: bytes, *, duration: float, author_id: str = "42",
                                 username: str = "alice") -> dict[str, Any]:
        """A voice message in the author's DM channel, as the apps send it: no text, the
        IS_VOICE_MESSAGE flag and one OGG/Opus attachment with its duration and waveform."""
        channel_id = self._dm_channel(author_id)
        payload = self._incoming("", channel_id, _user(author_id, username), None)
        attachment = self._attachment_payload("voice-message.ogg", "audio/ogg", data)
        attachment.update(duration_secs=duration, waveform=base64.b64encode(bytes(range(0, 256, 4))).decode())
        payload.update(attachments=[attachment], flags=VOICE_MESSAGE_FLAG)
        await self.dispatch("MESSAGE_CREATE", payload)
        return payload

    def _attachment_payload(self, filename: str, content_type: str, data: bytes) -> dict[str, Any]:
        attachment_id = self._snowflake()
        self._attachment_bytes[attachment_id] = data
        url = f"{self.cdn_base}/{attachment_id}/{filename}"
        payload: dict[str, Any] = {"id": attachment_id, "filename": filename, "size": len(data), "url": url,
                                   "proxy_url": url, "content_type": content_type}
        if content_type.startswith("image/"):
            try:
                from PIL import Image

                with Image.open(io.BytesIO(data)) as image:
                    payload["width"], payload["height"] = image.size
            except Exception:
                pass  # Discord leaves the size out of what it cannot read
        return payload

    async def _attachment(self, request: web.Request) -> web.Response:
        data = self._attachment_bytes.get(request.match_info["attachment_id"])
        if data is None:
            return web.Response(status=404, text="Not Found")
        self.downloads.append(request.match_info["filename"])
        return web.Response(body=data, content_type="application/octet-stream")

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
        self, what: str | Callable[[], bool], count: int = 1, timeout: float = 30.0
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
        if self.refuse_intents and int(data.get("intents", 0)) & MESSAGE_CONTENT_INTENT:
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            self._notify()
            return
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
