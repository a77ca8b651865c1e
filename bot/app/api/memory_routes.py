"""The admin API's memory routes: files listed, read and written, their history, search,
consolidation and extraction run now, a proposal answered."""

from __future__ import annotations

import logging

from aiohttp import web

from bot.app.api.common import RUNTIME, NotFound, agent_id_of, conversation_of, dumps, fail, ok
from bot.app.api.input import BadRequest, json_body, opened_id, whole_number
from bot.core.errors import VersionConflict, WorkspaceError
from bot.core.prompts import PromptLibrary
from memory.workspace.filenames import FilenameExtensionError, validate_workspace_filename
from memory.recall.search import DEFAULT_LIMIT, MAX_LIMIT, query_problem
from memory.workspace.tool import DEFAULT_MAX_CONTENT_BYTES

log = logging.getLogger(__name__)


async def emergence(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    agent_id = await agent_id_of(request)
    if rt.memory_services is None:
        return ok({"status": "disabled", "updated": False, "reason": "emergence is not available"})
    try:
        outcome = await rt.memory_services.emergence.emerge(agent_id)
    except Exception as exc:
        log.exception("emergence failed")
        return fail(500, rt.core.prompts.text("api_emergence_failed", error=type(exc).__name__))
    if outcome.status == "failed":
        return fail(500, rt.core.prompts.text("api_emergence_failed", error=outcome.reason))
    return ok({"status": outcome.status, "updated": bool(outcome.updated), "reason": outcome.reason})


async def summarize(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    agent_id, conversation = await conversation_of(request)
    conversation_id = conversation.id
    if rt.memory_services is None:
        return fail(500, rt.core.prompts.text("api_summarize_failed", error="memory worker not running"))
    try:
        outcome = await rt.memory_services.worker.summarize_now(agent_id, conversation_id)
    except Exception as exc:
        log.exception("summarize failed")
        return fail(500, rt.core.prompts.text("api_summarize_failed", error=type(exc).__name__))
    if outcome.status == "failed":
        return fail(500, rt.core.prompts.text("api_summarize_failed", error=outcome.reason))
    return ok({"status": outcome.status, "updated": bool(getattr(outcome, "updated", False)),
                "reason": outcome.reason})


async def list_files(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    agent_id = await agent_id_of(request)
    files = await rt.core.memory_files.files(agent_id, request.query.get("prefix", ""))
    return ok({"agentId": agent_id, "count": len(files), "files": [
        {"filename": f.filename, "enabled": f.enabled, "fileSize": f.file_size, "updateTime": f.update_time}
        for f in files]})


async def search(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    query = request.query.get("q", "")
    if not query.strip():
        raise BadRequest("q must be a non-empty search query")
    if (refused := query_problem(query)) is not None:  # before any other work, the agent's lookup too
        raise BadRequest(refused.text(rt.core.prompts))
    limit = whole_number(request.query.get("limit", str(DEFAULT_LIMIT)), "limit", 1, MAX_LIMIT)
    source = request.query.get("source", "all")
    if source not in ("all", "notes", "conversations"):
        raise BadRequest('source must be "all", "notes" or "conversations"')
    agent_id = await agent_id_of(request)
    return ok(await rt.search.search(agent_id, query, limit, source))


async def read_file(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    agent_id = await agent_id_of(request)
    filename = _workspace_name(rt.core.prompts, request.match_info["filename"])
    record = await rt.core.memory_files.read(agent_id, filename)
    if record is None:
        raise NotFound(rt.core.prompts.text("tool_error_not_found", filename=filename))
    # Content and version from one read: an editor's save names the version of what it shows.
    # fileId: which file this is, so a save can never land in another agent's file of that name.
    return ok({"agentId": agent_id, "filename": record.filename, "enabled": record.enabled,
                "fileSize": record.file_size, "content": record.content, "updateTime": record.update_time,
                "version": record.version, "fileId": record.id})


def _workspace_name(prompts: PromptLibrary, raw: str) -> str:
    """A file name the workspace accepts, or the not-found answer saying why not (as the model's tool says it)."""
    try:
        return validate_workspace_filename(raw)
    except FilenameExtensionError:
        raise NotFound(prompts.text("tool_error_extension")) from None
    except WorkspaceError as error:
        raise NotFound(prompts.text("tool_error_name", reason=str(error))) from None


async def file_history(request: web.Request) -> web.Response:
    """A file's kept versions, the newest first, each with its content and where it came from."""
    rt = request.app[RUNTIME]
    agent_id = await agent_id_of(request)
    filename = request.match_info["filename"]
    found = await rt.core.memory_files.versions(agent_id, filename)
    if found is None:
        raise NotFound(rt.core.prompts.text("tool_error_not_found", filename=filename[:200]))
    record, versions = found.file, found.versions
    return ok({"agentId": agent_id, "filename": record.filename, "version": record.version, "versions": [
        {"version": v.version, "change": v.change, "runId": v.run_id, "createTime": v.create_time,
         "content": v.content, "fileSize": len(v.content.encode("utf-8")), "current": v.version == record.version}
        for v in versions]})


async def proposal(request: web.Request) -> web.Response:
    """The consolidation waiting for the owner's review (null when none): MEMORY.md now, as proposed, and why."""
    rt = request.app[RUNTIME]
    agent_id = await agent_id_of(request)
    found = await rt.memory_services.review.pending(agent_id) if rt.memory_services else None
    if found is None:
        return ok({"agentId": agent_id, "proposal": None})
    current, version = await rt.core.workspace.read_text(agent_id, found.filename)
    return ok({"agentId": agent_id, "proposal": {
        "id": found.id, "filename": found.filename, "baseVersion": found.base_version, "version": version,
        "current": current, "content": found.content, "reason": found.reason, "createTime": found.create_time,
        "expireTime": found.expire_time}})


async def answer_proposal(request: web.Request) -> web.Response:
    """POST .../proposal/approve or .../proposal/reject: 409 when MEMORY.md changed since the proposal."""
    rt = request.app[RUNTIME]
    agent_id = await agent_id_of(request)
    if rt.memory_services is None:
        raise NotFound(rt.core.prompts.text("proposal_none"))
    review = rt.memory_services.review
    if await review.pending(agent_id) is None:
        raise NotFound(rt.core.prompts.text("proposal_none"))
    if request.match_info["answer"] == "reject":
        return ok({"agentId": agent_id, "status": "rejected", "msg": await review.reject(agent_id)})
    applied, text = await review.apply(agent_id)
    if not applied:
        return fail(409, text)
    return ok({"agentId": agent_id, "status": "approved", "msg": text})


def _conflict(msg: str, agent_id: int, filename: str, version: int) -> web.Response:
    return web.json_response({"code": 409, "msg": msg, "data": {"agentId": agent_id, "filename": filename,
                                                                "version": version}}, status=409, dumps=dumps)


async def write_file(request: web.Request) -> web.Response:
    """A versioned write: `version` is the one the editor read (0: a new file); if the file
    changed meanwhile, 409 with the version it has now, and nothing is overwritten.

    An editor also sends the `agentId` and `fileId` it read: a save that names another
    agent, or another file of the same name (another agent's, a removed one), is refused
    with 409 too; versions alone cannot tell two agents' SOUL.md at version 1 apart.
    """
    rt = request.app[RUNTIME]
    agent_id = await agent_id_of(request)
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
    return ok({"agentId": agent_id, "filename": record.filename, "version": record.version,
                "fileSize": record.file_size, "updateTime": record.update_time, "created": outcome.created})
