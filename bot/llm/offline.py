"""OfflineClient: answers without a network, so the pipeline runs before a model is configured."""

from __future__ import annotations

import json
from typing import Any

from bot.core.content.messages import TIME_LABEL, without_time
from bot.core.lifecycle import AsyncResource
from bot.llm.port import LLMClient, LLMRequest, LLMResponse, TextListener


class OfflineClient(AsyncResource):
    """Answers without a network so a newcomer can watch the pipeline work (no API key set)."""

    def __init__(self, reply_template: str = "(offline) {text}") -> None:
        self._template = reply_template

    async def complete(self, request: LLMRequest, on_text: TextListener | None = None) -> LLMResponse:
        if request.purpose in ("memory", "emergence"):
            text = json.dumps({"should_update": False, "reason": "offline mode: no model configured"})
        elif request.purpose == "summary":
            text = "(offline summary of earlier messages)"
        else:
            text = self._template.format(text=_last_user_text(request.messages))
            if on_text is not None:
                on_text(text)
        return LLMResponse(text=text, content=[{"type": "text", "text": text}], stop_reason="end_turn",
                           model="offline")


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    """What the user wrote last, without the time label the agent puts before it."""
    return without_time(_last_user_content(messages))


def _last_user_content(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts: list[str] = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        texts = [t for t in texts if not TIME_LABEL.fullmatch(t)]
        if texts:
            return texts[-1]
    return ""


def answers_offline(llm: LLMClient) -> bool:
    """True when the client, under any wrappers (usage recording...), is the canned offline one."""
    client: object = llm
    for _ in range(8):  # wrappers nest a level or two; a loop of them must not hang start-up
        if isinstance(client, OfflineClient):
            return True
        client = getattr(client, "inner", None)
    return False
