"""What every route of the admin API shares: the runtime it serves, JSON answers, the agent a path names."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from bot.app.runtime import Runtime
from bot.core.records import ConversationRecord

RUNTIME = web.AppKey("runtime", Runtime)
AGENT_ID = re.compile(r"[0-9]{1,18}")  # ASCII digits only: "²".isdigit() is True


def ok(data: dict[str, Any], **top: Any) -> web.Response:
    return web.json_response({"code": 200, "data": data, **top}, dumps=dumps)


def fail(status: int, msg: str) -> web.Response:
    return web.json_response({"code": status, "msg": msg}, status=status, dumps=dumps)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


async def agent_id_of(request: web.Request) -> int:
    rt = request.app[RUNTIME]
    raw = request.match_info["agent_id"]
    if not AGENT_ID.fullmatch(raw) or not await rt.core.agents.exists(int(raw)):
        raise NotFound(rt.core.prompts.text("api_unknown_agent", agent_id=raw[:32]))
    return int(raw)


async def conversation_of(request: web.Request) -> tuple[int, ConversationRecord]:
    """(agent id, conversation) the path names; NotFound unless the conversation is that agent's."""
    rt = request.app[RUNTIME]
    agent_id = await agent_id_of(request)
    conversation_id = request.match_info["conversation_id"]
    found = await rt.core.repos.conversations.get(conversation_id)
    if found is None or found.agent_id != agent_id:
        raise NotFound(rt.core.prompts.text("api_unknown_conversation", conversation_id=conversation_id[:64]))
    return agent_id, found


class NotFound(Exception):
    pass
