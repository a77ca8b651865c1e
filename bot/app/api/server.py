"""Admin HTTP API and the web chat page on aiohttp (SPEC S10, S12)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import ipaddress
import json
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

from bot.app.api.input import WHOLE_NUMBER, BadRequest, json_body, opened_id, whole_number
from bot.core.config import ApiConfig
from bot.core.errors import VersionConflict, WorkspaceError
from bot.app.runtime import Runtime
from bot.storage.people import OWNER_PERSON_ID
from bot.core.text import clean_text, is_blank
from bot.app.api.names import named_agents, named_conversations
from channels.base import InboundMessage, IncomingFile
from bot.core.prompts import PromptLibrary
from memory.workspace.filenames import FilenameExtensionError, validate_workspace_filename
from memory.recall.search import DEFAULT_LIMIT, MAX_LIMIT, query_problem
from memory.workspace.tool import DEFAULT_MAX_CONTENT_BYTES

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 2 * 1024 * 1024
_MAX_LISTED = 500  # conversations or messages in one answer (messages page on with ?after=)
# A request line may carry a long search query (percent-encoded CJK is 9 bytes a character):
# the route answers it with a JSON 400, where aiohttp's own 8 190-byte limit answers in plain text.
MAX_REQUEST_LINE = 128 * 1024
_RUNTIME = web.AppKey("runtime", Runtime)
_TOKEN = web.AppKey("token", str)
_HOST = web.AppKey("host", str)
_AGENT_ID = re.compile(r"[0-9]{1,18}")  # ASCII digits only: "²".isdigit() is True
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


def _ok(data: dict[str, Any], **top: Any) -> web.Response:
    return web.json_response({"code": 200, "data": data, **top}, dumps=_dumps)


def _fail(status: int, msg: str) -> web.Response:
    return web.json_response({"code": status, "msg": msg}, status=status, dumps=_dumps)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@web.middleware
async def _same_site(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse foreign Host names (DNS rebinding) and cross-site requests that change state."""
    prompts = request.app[_RUNTIME].core.prompts
    if not host_allowed(request.host, request.app[_HOST]):
        return _fail(403, prompts.text("api_forbidden_host"))
    origin = request.headers.get("Origin")
    if request.method in _UNSAFE_METHODS and origin is not None:
        if origin.rstrip("/").lower() != f"{request.scheme}://{request.host}".lower():
            return _fail(403, prompts.text("api_forbidden_origin"))
    return await handler(request)


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = request.app[_TOKEN]
    if token and request.path not in _OPEN_PATHS:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return _fail(401, request.app[_RUNTIME].core.prompts.text("api_unauthorized"))
    return await handler(request)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status >= 400:
            return _fail(exc.status, exc.reason)
        raise
    except ConnectionError:
        if not _client_gone(request):
            log.exception("API request failed: %s %s", request.method, request.path)
            return _fail(500, "internal error")
        # A closed tab is no failure of ours: one line, and an answer nobody will read.
        log.info("API client left before its answer: %s %s", request.method, request.path)
        return _fail(400, "the client closed the connection")
    except Exception:  # a bug in one request must not take the daemon down
        log.exception("API request failed: %s %s", request.method, request.path)
        return _fail(500, "internal error")


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _agent_id(request: web.Request) -> int:
    rt = request.app[_RUNTIME]
    raw = request.match_info["agent_id"]
    if not _AGENT_ID.fullmatch(raw) or not await rt.core.agents.exists(int(raw)):
        raise _NotFound(rt.core.prompts.text("api_unknown_agent", agent_id=raw[:32]))
    return int(raw)


class _NotFound(Exception):
    pass


@web.middleware
async def _client_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except _NotFound as exc:
        return _fail(404, str(exc))
    except BadRequest as exc:
        return _fail(400, request.app[_RUNTIME].core.prompts.text("api_bad_request", error=str(exc)))


def _web_client(conversation_id: str | None) -> str:
    """The chat a web conversationId names: `web:` and a /new `#<n>` suffix are our own."""
    if conversation_id is None:
        return uuid.uuid4().hex
    client = _OWN_SUFFIX.sub("", conversation_id.removeprefix("web:"))
    if not _CLIENT_ID.fullmatch(client):
        raise BadRequest("conversationId may hold only letters, digits and _ . : - (at most 128)")
    return client


async def emergence(request: web.Request) -> web.Response:
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    if rt.memory_services is None:
        return _ok({"status": "disabled", "updated": False, "reason": "emergence is not available"})
    try:
        outcome = await rt.memory_services.emergence.emerge(agent_id)
    except Exception as exc:
        log.exception("emergence failed")
        return _fail(500, rt.core.prompts.text("api_emergence_failed", error=type(exc).__name__))
    if outcome.status == "failed":
        return _fail(500, rt.core.prompts.text("api_emergence_failed", error=outcome.reason))
    return _ok({"status": outcome.status, "updated": bool(outcome.updated), "reason": outcome.reason})


async def summarize(request: web.Request) -> web.Response:
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    conversation_id = request.match_info["conversation_id"]
    conversation = await rt.core.repos.conversations.get(conversation_id)
    if conversation is None or conversation.agent_id != agent_id:
        raise _NotFound(f"conversation {conversation_id[:80]} not found for agent {agent_id}")
    if rt.memory_services is None:
        return _fail(500, rt.core.prompts.text("api_summarize_failed", error="memory worker not running"))
    try:
        outcome = await rt.memory_services.worker.summarize_now(agent_id, conversation_id)
    except Exception as exc:
        log.exception("summarize failed")
        return _fail(500, rt.core.prompts.text("api_summarize_failed", error=type(exc).__name__))
    if outcome.status == "failed":
        return _fail(500, rt.core.prompts.text("api_summarize_failed", error=outcome.reason))
    return _ok({"status": outcome.status, "updated": bool(getattr(outcome, "updated", False)),
                "reason": outcome.reason})


async def list_files(request: web.Request) -> web.Response:
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    files = await rt.core.workspace.list(agent_id, request.query.get("prefix", ""))
    return _ok({"agentId": agent_id, "count": len(files), "files": [
        {"filename": f.filename, "enabled": f.enabled, "fileSize": f.file_size, "updateTime": f.update_time}
        for f in files]})


async def search(request: web.Request) -> web.Response:
    rt = request.app[_RUNTIME]
    query = request.query.get("q", "")
    if not query.strip():
        raise BadRequest("q must be a non-empty search query")
    if (refused := query_problem(query)) is not None:  # before any other work, the agent's lookup too
        raise BadRequest(refused.text(rt.core.prompts))
    limit = whole_number(request.query.get("limit", str(DEFAULT_LIMIT)), "limit", 1, MAX_LIMIT)
    source = request.query.get("source", "all")
    if source not in ("all", "notes", "conversations"):
        raise BadRequest('source must be "all", "notes" or "conversations"')
    agent_id = await _agent_id(request)
    return _ok(await rt.search.search(agent_id, query, limit, source))


async def read_file(request: web.Request) -> web.Response:
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    filename = _workspace_name(rt.core.prompts, request.match_info["filename"])
    record = await rt.core.workspace.get(agent_id, filename)
    if record is None:
        raise _NotFound(rt.core.prompts.text("tool_error_not_found", filename=filename))
    # Content and version from one read: an editor's save names the version of what it shows.
    # fileId: which file this is, so a save can never land in another agent's file of that name.
    return _ok({"agentId": agent_id, "filename": record.filename, "enabled": record.enabled,
                "fileSize": record.file_size, "content": record.content, "updateTime": record.update_time,
                "version": record.version, "fileId": record.id})


def _workspace_name(prompts: PromptLibrary, raw: str) -> str:
    """A file name the workspace accepts, or the not-found answer saying why not (as the model's tool says it)."""
    try:
        return validate_workspace_filename(raw)
    except FilenameExtensionError:
        raise _NotFound(prompts.text("tool_error_extension")) from None
    except WorkspaceError as error:
        raise _NotFound(prompts.text("tool_error_name", reason=str(error))) from None


async def file_history(request: web.Request) -> web.Response:
    """A file's kept versions, the newest first, each with its content and where it came from."""
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    filename = request.match_info["filename"]
    record = await rt.core.workspace.get(agent_id, filename)
    if record is None:
        raise _NotFound(rt.core.prompts.text("tool_error_not_found", filename=filename[:200]))
    versions = await rt.core.repos.file_history.versions(record.id, rt.core.workspace.history_versions)
    return _ok({"agentId": agent_id, "filename": record.filename, "version": record.version, "versions": [
        {"version": v.version, "change": v.change, "runId": v.run_id, "createTime": v.create_time,
         "content": v.content, "fileSize": len(v.content.encode("utf-8")), "current": v.version == record.version}
        for v in versions]})


async def proposal(request: web.Request) -> web.Response:
    """The consolidation waiting for the owner's review (null when none): MEMORY.md now, as proposed, and why."""
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    found = await rt.memory_services.review.pending(agent_id) if rt.memory_services else None
    if found is None:
        return _ok({"agentId": agent_id, "proposal": None})
    current, version = await rt.core.workspace.read_text(agent_id, found.filename)
    return _ok({"agentId": agent_id, "proposal": {
        "id": found.id, "filename": found.filename, "baseVersion": found.base_version, "version": version,
        "current": current, "content": found.content, "reason": found.reason, "createTime": found.create_time,
        "expireTime": found.expire_time}})


async def answer_proposal(request: web.Request) -> web.Response:
    """POST .../proposal/approve or .../proposal/reject: 409 when MEMORY.md changed since the proposal."""
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    if rt.memory_services is None:
        raise _NotFound(rt.core.prompts.text("proposal_none"))
    review = rt.memory_services.review
    if await review.pending(agent_id) is None:
        raise _NotFound(rt.core.prompts.text("proposal_none"))
    if request.match_info["answer"] == "reject":
        return _ok({"agentId": agent_id, "status": "rejected", "msg": await review.reject(agent_id)})
    applied, text = await review.apply(agent_id)
    if not applied:
        return _fail(409, text)
    return _ok({"agentId": agent_id, "status": "approved", "msg": text})


def _conflict(msg: str, agent_id: int, filename: str, version: int) -> web.Response:
    return web.json_response({"code": 409, "msg": msg, "data": {"agentId": agent_id, "filename": filename,
                                                                "version": version}}, status=409, dumps=_dumps)


async def write_file(request: web.Request) -> web.Response:
    """A versioned write: `version` is the one the editor read (0: a new file); if the file
    changed meanwhile, 409 with the version it has now, and nothing is overwritten.

    An editor also sends the `agentId` and `fileId` it read: a save that names another
    agent, or another file of the same name (another agent's, a removed one), is refused
    with 409 too; versions alone cannot tell two agents' SOUL.md at version 1 apart.
    """
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    try:
        filename = validate_workspace_filename(request.match_info["filename"])
    except WorkspaceError as exc:
        raise BadRequest(f"filename: {exc}") from None
    body = await json_body(request)
    content, version = body.get("content"), body.get("version")
    if not isinstance(content, str):
        raise BadRequest("content must be a string")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise BadRequest("version must be the file's version as read (0 for a new file)")
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest("content is not valid Unicode text") from None
    if size > DEFAULT_MAX_CONTENT_BYTES:
        raise BadRequest(f"content is {size} bytes; the limit is {DEFAULT_MAX_CONTENT_BYTES}")
    opened_agent, opened_file = opened_id(body, "agentId"), opened_id(body, "fileId")
    if opened_agent is not None or opened_file is not None:
        current = await rt.core.workspace.get(agent_id, filename)
        if opened_agent not in (None, agent_id) or (opened_file is not None and (
                current is None or current.id != opened_file)):
            log.info("API save refused: the editor was opened on another agent's or another file")
            return _conflict(rt.core.prompts.text("api_file_mismatch", filename=filename, agent_id=agent_id),
                             agent_id, filename, current.version if current else 0)
    try:
        # The file id goes with the write too: the write updates only that file's row, so a file
        # removed and recreated at the same version since the check above is refused, not written.
        outcome = await rt.core.workspace.write(agent_id, filename, content, expected_version=version, change="api",
                                                expected_file_id=opened_file)
    except VersionConflict as conflict:
        return _conflict(rt.core.prompts.text("api_version_conflict", filename=filename), agent_id, filename,
                         conflict.actual)
    record = outcome.file
    return _ok({"agentId": agent_id, "filename": record.filename, "version": record.version,
                "fileSize": record.file_size, "updateTime": record.update_time, "created": outcome.created})


async def conversations(request: web.Request) -> web.Response:
    """The agent's conversations, the most recently active first (read-only)."""
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    rows = (await rt.core.repos.conversations.recent_activity(agent_id))[:_MAX_LISTED]
    names = await named_conversations(rt.core.repos, rt.core.prompts, await rt.core.people.list(),
                                      [row.conversation for row in rows])
    items = [{"conversationId": row.conversation.id, "displayName": name, "channel": row.conversation.channel,
              "title": row.conversation.title, "archived": row.conversation.archived,
              "messageCount": row.message_count, "lastActivity": row.last_activity,
              "createTime": row.conversation.create_time} for row, name in zip(rows, names, strict=True)]
    return _ok({"agentId": agent_id, "count": len(items), "conversations": items})


async def agents(request: web.Request) -> web.Response:
    """Every agent with the name the page shows for it: its own, its person's or its group's (read-only)."""
    rt = request.app[_RUNTIME]
    items = (await named_agents(rt.core.repos, rt.core.prompts, await rt.core.people.list()))[:_MAX_LISTED]
    return _ok({"count": len(items), "agents": items})


async def people(request: web.Request) -> web.Response:
    """The people the bot knows: their accounts and their own agent (read-only)."""
    rt = request.app[_RUNTIME]
    listed = await rt.core.people.list()
    items = [{"personId": p.id, "name": p.name, "owner": p.id == OWNER_PERSON_ID, "accounts": list(p.accounts),
              "agentId": p.agent_id, "createTime": p.create_time} for p in listed[:_MAX_LISTED]]
    return _ok({"count": len(items), "people": items})


async def tasks(request: web.Request) -> web.Response:
    """The agent's live reminders and scheduled tasks in every chat, the next due first (the
    nightly consolidation is not a task)."""
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    listed = await rt.tasks.for_agent(agent_id)
    items = [{**rt.tasks.describe(task), "timezone": task.timezone, "channel": task.chat.channel,
              "chatId": task.chat.chat_id, "threadId": task.chat.thread_id} for task in listed[:_MAX_LISTED]]
    return _ok({"agentId": agent_id, "count": len(items), "tasks": items})


async def cancel_task(request: web.Request) -> web.Response:
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    raw = request.match_info["task_id"]
    task_id = whole_number(raw, "the task id", 1) if WHOLE_NUMBER.fullmatch(raw) else None
    if task_id is None or not await rt.tasks.cancel_for_agent(agent_id, task_id):
        raise _NotFound(rt.core.prompts.text("api_unknown_task", task_id=raw[:32], agent_id=agent_id))
    return _ok({"taskId": task_id, "cancelled": True})


async def conversation_messages(request: web.Request) -> web.Response:
    """What was said in one conversation, oldest first; tool turns left out (read-only)."""
    rt = request.app[_RUNTIME]
    agent_id = await _agent_id(request)
    conversation_id = request.match_info["conversation_id"]
    found = await rt.core.repos.conversations.get(conversation_id)
    if found is None or found.agent_id != agent_id:
        raise _NotFound(rt.core.prompts.text("api_unknown_conversation", conversation_id=conversation_id[:64]))
    after = whole_number(request.query.get("after", "0"), "after (a message id)", 0)
    records = await rt.core.repos.messages.after(conversation_id, after, limit=_MAX_LISTED)
    items = [{"messageId": m.id, "role": m.role, "content": m.content, "senderName": m.sender_name,
              "time": m.create_time}
             for m in records if m.role in ("user", "assistant") and m.content_format == "text"]
    return _ok({"agentId": agent_id, "conversationId": conversation_id, "count": len(items), "messages": items,
                "nextAfter": records[-1].id if len(records) == _MAX_LISTED else None})


async def _chat_message(request: web.Request) -> tuple[int, InboundMessage]:
    agent_id = await _agent_id(request)
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
    rt = request.app[_RUNTIME]
    agent_id, inbound = await _chat_message(request)
    reply = await rt.router.handle(inbound, agent_id=agent_id)
    if reply is None:
        return _fail(503, rt.core.prompts.text("api_not_accepting"))
    if reply.failure:  # the apology, as an error the caller can tell from a reply
        return _fail(502 if reply.failure == "llm" else 503, reply.text)
    data = {"reply": reply.text, "conversationId": reply.conversation_id}
    # The spec names both the envelope and the bare {reply, conversationId}: answer with both.
    return _ok(data, **data)


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
                await self._response.write(f"event: {event}\ndata: {_dumps(data)}\n\n".encode())
            except (ConnectionResetError, RuntimeError):  # the page went away; the reply is stored anyway
                return


async def chat_stream(request: web.Request) -> web.StreamResponse:
    rt = request.app[_RUNTIME]
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
    board = request.app[_RUNTIME].channel_states
    overall = "ok" if board.all_ok() else "degraded"
    return _ok({"status": overall, "channels": board.states()}, status=overall)


async def index(request: web.Request) -> web.Response:
    page = resources.files("bot.app").joinpath("web", "index.html").read_text(encoding="utf-8")
    return web.Response(text=page, content_type="text/html", charset="utf-8")


def build_app(rt: Runtime, config: ApiConfig, token: str | None = None) -> web.Application:
    """`token` overrides config.token (the daemon passes the generated one)."""
    media = rt.core.config.mate.media
    # Room for the largest images a chat message may carry, in base64 (4/3 of their size).
    body_limit = MAX_BODY_BYTES + math.ceil(media.max_files * media.max_file_mb * 1024 * 1024 * 4 / 3)
    app = web.Application(middlewares=[_errors, _same_site, _auth, _client_errors], client_max_size=body_limit)
    app[_RUNTIME] = rt
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
