"""Prompt-cache lifetimes: a moment the test moves, and the cache controls of the chat
requests the fake received."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any


from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, is_memory_extraction
from tests.support.messages import blocks


START = datetime(2026, 3, 4, 9, 0, tzinfo=timezone.utc)


class Moment:
    """The agent's clock and the fake's cache clock in one, moved on by the test."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def seconds(self) -> float:
        return self.now.timestamp()

    def wait(self, **gap: float) -> None:
        self.now += timedelta(**gap)


def controls(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every cache_control the request carries, in the order the API reads them."""

    system = body.get("system")
    holders = [*(body.get("tools") or []), *(system if isinstance(system, list) else [])]
    holders += [b for message in body["messages"] for b in blocks(message)]
    return [h["cache_control"] for h in holders if isinstance(h, dict) and "cache_control" in h]


def lifetimes(body: dict[str, Any]) -> set[str]:
    return {control.get("ttl", "5m") for control in controls(body)}


def chat_requests(fake: FakeAnthropic) -> Iterator[RecordedRequest]:
    return (r for r in fake.requests if r.path == "/v1/messages" and not is_memory_extraction(r.body))
