"""Admin HTTP API and the web chat page on aiohttp (SPEC S10, S12)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import ipaddress
import logging
import math
import re
import uuid
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler

from bot.app.api.common import RUNTIME, NotFound, agent_id_of, conversation_of, dumps, fail, ok
from bot.app.api.memory_routes import (
    answer_proposal,
    emergence,
    file_history,
    list_files,
    proposal,
    read_file,
    search,
    summarize,
    write_file,
)
from bot.app.api.input import WHOLE_NUMBER, BadRequest, json_body, whole_number
from bot.core.config import ApiConfig
from bot.app.runtime import Runtime
from bot.storage.people import OWNER_PERSON_ID
from bot.core.text import clean_text, is_blank
from bot.app.api.names import named_agents, named_conversations
from channels.base import InboundMessage, IncomingFile

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 2 * 1024 * 1024
_MAX_LISTED = 500  # conversations or messages in one answer (messages page on with ?after=)
# A request line may carry a long search query (percent-encoded CJK is 9 bytes a character):
# the route answers it with a JSON 400, where aiohttp's own 8 190-byte limit answers in plain text.
MAX_REQUEST_LINE = 128 * 1024
_TOKEN = web.AppKey("token", str)
_HOST = web.AppKey("host", str)
_CLIENT_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_OWN_SUFFIX = re.compile(r"#[0-9]{1,9}$")  # what /new appends to a conversation id
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")
_UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_OPEN_PATHS = ("/", "/healthz")


def host_allowed(host_header: str, configured: str) -> bool:
    """The Host header names this API: its configured host, a loopback address or localhost.

    Anything else is a DNS-rebinding page talking to us under its own name. A wildcard
    bind (0.0.0.0) is reached under any name, and always needs the token.
    """
    if configured in _WILDCARD_HOSTS:
        return True
    host = host_header.strip().lower()
    if host.startswith("["):  # [::1]:8765
        host = host[1:host.find("]")] if "]" in host else ""
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    if not host:
        return False
    if host in ("localhost", configured.lower()):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@web.middleware
async def _same_site(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse foreign Host names (DNS rebinding) and cross-site requests that change state."""
    prompts = request.app[RUNTIME].core.prompts
    if not host_allowed(request.host, request.app[_HOST]):
        return fail(403, prompts.text("api_forbidden_host"))
    origin = request.headers.get("Origin")
    if request.method in _UNSAFE_METHODS and origin is not None:
        if origin.rstrip("/").lower() != f"{request.scheme}://{request.host}".lower():
            return fail(403, prompts.text("api_forbidden_origin"))
    return await handler(request)


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = request.app[_TOKEN]
    if token and request.path not in _OPEN_PATHS:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return fail(401, request.app[RUNTIME].core.prompts.text("api_unauthorized"))
    return await handler(request)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status >= 400:
            return fail(exc.status, exc.reason)
        raise
    except ConnectionError:
        if not _client_gone(request):
            log.exception("API request failed: %s %s", request.method, request.path)
            return fail(500, "internal error")
        # A closed tab is no failure of ours: one line, and an answer nobody will read.
        log.info("API client left before its answer: %s %s", request.method, request.path)
        return fail(400, "the client closed the connection")
    except Exception:  # a bug in one request must not take the daemon down
        log.exception("API request failed: %s %s", request.method, request.path)
        return fail(500, "internal error")


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


@web.middleware
async def _client_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except NotFound as exc:
        return fail(404, str(exc))
    except BadRequest as exc:
        return fail(400, request.app[RUNTIME].core.prompts.text("api_bad_request", error=str(exc)))


def _web_client(conversation_id: str | None) -> str:
    """The chat a web conversationId names: `web:` and a /new `#<n>` suffix are our own."""
    if conversation_id is None:
        return uuid.uuid4().hex
    client = _OWN_SUFFIX.sub("", conversation_id.removeprefix("web:"))
    if not _CLIENT_ID.fullmatch(client):
        raise BadRequest("conversationId may hold only letters, digits and _ . : - (at most 128)")
    return client


async def conversations(request: web.Request) -> web.Response:
    """The agent's conversations, the most recently active first (read-only)."""
    rt = request.app[RUNTIME]
    agent_id = await agent_id_of(request)
    rows = (await rt.core.repos.conversations.recent_activity(agent_id))[:_MAX_LISTED]
    names = await named_conversations(rt.core.repos, rt.core.prompts, await rt.core.people.list(),
                                      [row.conversation for row in rows])
    items = [{"conversationId": row.conversation.id, "displayName": name, "channel": row.conversation.channel,
              "title": row.conversation.title, "archived": row.conversation.archived,
              "messageCount": row.message_count, "lastActivity": row.last_activity,
              "createTime": row.conversation.create_time} for row, name in zip(rows, names, strict=True)]
    return ok({"agentId": agent_id, "count": len(items), "conversations": items})


async def agents(request: web.Request) -> web.Response:
    """Every agent with the name the page shows for it: its own, its person's or its group's (read-only)."""
    rt = request.app[RUNTIME]
    items = (await named_agents(rt.core.repos, rt.core.prompts, await rt.core.people.list()))[:_MAX_LISTED]
    return ok({"count": len(items), "agents": items})


async def people(request: web.Request) -> web.Response:
    """The people the bot knows: their accounts and their own agent (read-only)."""
    rt = request.app[RUNTIME]
    listed = await rt.core.people.list()
    items = [{"personId": p.id, "name": p.name, "owner": p.id == OWNER_PERSON_ID, "accounts": list(p.accounts),
              "agentId": p.agent_id, "createTime": p.create_time} for p in listed[:_MAX_LISTED]]
    return ok({"count": len(items), "people": items})


async def tasks(request: web.Request) -> web.Response:
    """The agent's live reminders and scheduled tasks in every chat, the next due first (the
    nightly consolidation is not a task)."""
    rt = request.app[RUNTIME]
    agent_id = await agent_id_of(request)
    listed = await rt.tasks.for_agent(agent_id)
    items = [{**rt.tasks.describe(task), "timezone": task.timezone, "channel": task.chat.channel,
              "chatId": task.chat.chat_id, "threadId": task.chat.thread_id} for task in listed[:_MAX_LISTED]]
    return ok({"agentId": agent_id, "count": len(items), "tasks": items})


async def cancel_task(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    agent_id = await agent_id_of(request)
    raw = request.match_info["task_id"]
    task_id = whole_number(raw, "the task id", 1) if WHOLE_NUMBER.fullmatch(raw) else None
    if task_id is None or not await rt.tasks.cancel_for_agent(agent_id, task_id):
        raise NotFound(rt.core.prompts.text("api_unknown_task", task_id=raw[:32], agent_id=agent_id))
    return ok({"taskId": task_id, "cancelled": True})


async def conversation_messages(request: web.Request) -> web.Response:
    """What was said in one conversation, oldest first; tool turns left out (read-only)."""
    rt = request.app[RUNTIME]
    agent_id, conversation = await conversation_of(request)
    conversation_id = conversation.id
    after = whole_number(request.query.get("after", "0"), "after (a message id)", 0)
    records = await rt.core.repos.messages.after(conversation_id, after, limit=_MAX_LISTED)
    items = [{"messageId": m.id, "role": m.role, "content": m.content, "senderName": m.sender_name,
              "time": m.create_time}
             for m in records if m.role in ("user", "assistant") and m.content_format == "text"]
    return ok({"agentId": agent_id, "conversationId": conversation_id, "count": len(items), "messages": items,
                "nextAfter": records[-1].id if len(records) == _MAX_LISTED else None})


async def _chat_message(request: web.Request) -> tuple[int, InboundMessage]:
    agent_id = await agent_id_of(request)
    body = await json_body(request)
    message = body.get("message", "")
    images = _images(body.get("images"))
    if not isinstance(message, str) or (is_blank(clean_text(message)) and not images):  # as the router sees it
        raise BadRequest("message must be a non-empty string (or send images)")
    conversation_id = body.get("conversationId")
    if conversation_id is not None and not isinstance(conversation_id, str):
        raise BadRequest("conversationId must be a string")
    client = _web_client(conversation_id)
    return agent_id, InboundMessage(channel="web", chat_id=client, sender_id="web", sender_name="web",
                                    text=message, is_direct=True, trigger_source="web", files=images)


def _images(value: Any) -> tuple[IncomingFile, ...]:
    """`images: [{media_type, data}]` (data in base64) as the files of the message."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise BadRequest("images must be a list of {media_type, data}")
    files = []
    for index, image in enumerate(value):
        if not isinstance(image, dict) or not isinstance(image.get("data"), str):
            raise BadRequest(f"images[{index}] must be an object with media_type and data (base64)")
        media_type = image.get("media_type", "")
        if not isinstance(media_type, str) or not media_type.startswith("image/"):
            raise BadRequest(f"images[{index}].media_type must be an image type, e.g. image/png")
        try:
            data = base64.b64decode(image["data"], validate=True)
        except ValueError:
            raise BadRequest(f"images[{index}].data is not valid base64") from None
        files.append(IncomingFile(f"image {index + 1}", media_type, len(data), _constant(data), is_photo=True))
    return tuple(files)


def _constant(data: bytes) -> Callable[[], Awaitable[bytes]]:
    async def read() -> bytes:
        return data

    return read


async def chat(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    agent_id, inbound = await _chat_message(request)
    reply = await rt.router.handle(inbound, agent_id=agent_id)
    if reply is None:
        return fail(503, rt.core.prompts.text("api_not_accepting"))
    if reply.failure:  # the apology, as an error the caller can tell from a reply
        return fail(502 if reply.failure == "llm" else 503, reply.text)
    data = {"reply": reply.text, "conversationId": reply.conversation_id}
    # The spec names both the envelope and the bare {reply, conversationId}: answer with both.
    return ok(data, **data)


class _EventStream:
    """A ReplyStream as server-sent events: `delta` per piece of text, `status` per tool round."""

    def __init__(self, response: web.StreamResponse) -> None:
        self._response = response
        self._events: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write(), name="web-chat-stream")

    def text(self, delta: str) -> None:
        self._events.put_nowait(("delta", {"text": delta}))

    def status(self, line: str) -> None:
        self._events.put_nowait(("status", {"text": line}))

    async def finish(self, event: str, data: dict[str, Any]) -> None:
        self._events.put_nowait((event, data))
        self._events.put_nowait(None)
        await self._writer

    def abandon(self) -> None:
        self._writer.cancel()

    async def _write(self) -> None:
        while (item := await self._events.get()) is not None:
            event, data = item
            try:
                await self._response.write(f"event: {event}\ndata: {dumps(data)}\n\n".encode())
            except (ConnectionResetError, RuntimeError):  # the page went away; the reply is stored anyway
                return


async def chat_stream(request: web.Request) -> web.StreamResponse:
    rt = request.app[RUNTIME]
    agent_id, inbound = await _chat_message(request)  # bad input is answered as JSON, before the stream
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    events = _EventStream(response)
    try:
        reply = await rt.router.handle(inbound, agent_id=agent_id, stream=events)
    except asyncio.CancelledError:  # the page went away or the daemon stops
        events.abandon()
        raise
    except Exception:
        # The stream has started, so no JSON error can follow: the page still gets its `done`.
        log.exception("web chat stream failed")
        done: dict[str, Any] = {"reply": rt.core.prompts.text("llm_error"), "conversationId": None, "failure": "llm"}
    else:
        if reply is None:
            done = {"reply": rt.core.prompts.text("api_not_accepting"), "conversationId": None,
                    "failure": "unavailable"}
        else:
            done = {"reply": reply.text, "conversationId": reply.conversation_id}
            if reply.failure:
                done["failure"] = reply.failure
    await events.finish("done", done)
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await response.write_eof()
    return response


async def healthz(request: web.Request) -> web.Response:
    """200 while the daemon serves; `channels` says how each chat channel is doing."""
    board = request.app[RUNTIME].channel_states
    overall = "ok" if board.all_ok() else "degraded"
    return ok({"status": overall, "channels": board.states()}, status=overall)


async def index(request: web.Request) -> web.Response:
    page = resources.files("bot.app").joinpath("web", "index.html").read_text(encoding="utf-8")
    return web.Response(text=page, content_type="text/html", charset="utf-8")


def build_app(rt: Runtime, config: ApiConfig, token: str | None = None) -> web.Application:
    """`token` overrides config.token (the daemon passes the generated one)."""
    media = rt.core.config.mate.media
    # Room for the largest images a chat message may carry, in base64 (4/3 of their size).
    body_limit = MAX_BODY_BYTES + math.ceil(media.max_files * media.max_file_mb * 1024 * 1024 * 4 / 3)
    app = web.Application(middlewares=[_errors, _same_site, _auth, _client_errors], client_max_size=body_limit)
    app[RUNTIME] = rt
    app[_TOKEN] = config.token if token is None else token
    app[_HOST] = config.host
    app.router.add_post("/api/v1/memory/{agent_id}/emergence", emergence)
    app.router.add_post("/api/v1/memory/{agent_id}/summarize/{conversation_id}", summarize)
    app.router.add_get("/api/v1/memory/{agent_id}/files", list_files)
    # Before the file route, whose name may hold slashes (memory/2026-12-04.md).
    app.router.add_get("/api/v1/memory/{agent_id}/files/{filename:.+}/history", file_history)
    app.router.add_get("/api/v1/memory/{agent_id}/files/{filename:.+}", read_file)
    app.router.add_put("/api/v1/memory/{agent_id}/files/{filename:.+}", write_file)
    app.router.add_get("/api/v1/chat/{agent_id}/conversations", conversations)
    app.router.add_get("/api/v1/people", people)
    app.router.add_get("/api/v1/agents", agents)
    app.router.add_get("/api/v1/chat/{agent_id}/conversations/{conversation_id}/messages", conversation_messages)
    app.router.add_get("/api/v1/memory/{agent_id}/search", search)
    app.router.add_get("/api/v1/memory/{agent_id}/proposal", proposal)
    app.router.add_post("/api/v1/memory/{agent_id}/proposal/{answer:approve|reject}", answer_proposal)
    app.router.add_get("/api/v1/agents/{agent_id}/tasks", tasks)
    app.router.add_delete("/api/v1/agents/{agent_id}/tasks/{task_id}", cancel_task)
    app.router.add_post("/api/v1/chat/{agent_id}", chat)
    app.router.add_post("/api/v1/chat/{agent_id}/stream", chat_stream)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/", index)
    return app


class _ProtocolErrorsInOneLine(logging.LoggerAdapter[logging.Logger]):
    """aiohttp logs a request it cannot parse (a request line too long, not HTTP) with a
    traceback: that is the client's mistake, answered 400, and worth one line here."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            # The kind only: aiohttp's message quotes the start of the line, which may be a
            # header carrying the API token.
            self.logger.info("API request refused as malformed HTTP (%s)", type(exc_info).__name__)
            return
        self.logger.exception(msg, *args, exc_info=exc_info, **kwargs)


class ApiServer:
    """The aiohttp site as an async context manager; `port` is the bound port (0 = any)."""

    def __init__(self, rt: Runtime, config: ApiConfig, token: str | None = None) -> None:
        self._app = build_app(rt, config, token)
        self._config = config
        self._runner: web.AppRunner | None = None
        self.port = config.port

    async def __aenter__(self) -> ApiServer:
        # By the time the site closes, the daemon has drained what it will wait for: requests
        # still running are cancelled within 2 s instead of aiohttp's default minute.
        self._runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=2.0,
                                     max_line_size=MAX_REQUEST_LINE,
                                     logger=_ProtocolErrorsInOneLine(logging.getLogger("aiohttp.server")))
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._config.host, self._config.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("API listening on http://%s:%s", self._config.host, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
