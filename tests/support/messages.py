"""What a Messages API request holds, read the way the tests compare it: blocks, texts, layouts."""

from __future__ import annotations

from typing import Any

from tests.support.fakes.anthropic import untimed


def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def texts(message: dict[str, Any]) -> list[str]:
    return [untimed(b["text"]) for b in blocks(message) if b["type"] == "text"]


def plain(message: dict[str, Any]) -> dict[str, Any]:
    """A message as it read before prompt caching and time labels: no cache_control keys, a
    text block that was only made a list to carry a breakpoint is a string again, and a
    user message loses its leading "[YYYY-MM-DD HH:MM]" label (as text or as its own block)."""
    content = message["content"]
    if isinstance(content, list):
        marked = bool(content) and "cache_control" in content[-1]
        content = [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
        if message["role"] == "user" and len(content) > 1 and content[0].get("type") == "text" \
                and content[0]["text"] and not untimed(content[0]["text"]):
            content = content[1:]
        if marked and len(content) == 1 and set(content[0]) == {"type", "text"} and content[0]["type"] == "text":
            content = content[0]["text"]
    if message["role"] == "user" and isinstance(content, str):
        content = untimed(content)
    return {**message, "content": content}


def flat(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, text) per text block, in order: compares layouts whatever the merging."""
    return [(m["role"], t) for m in messages for t in texts(m)]


def assert_alternating(messages: list[dict[str, Any]]) -> None:
    assert messages[0]["role"] == "user"
    for before, after in zip(messages, messages[1:]):
        assert before["role"] != after["role"], messages
