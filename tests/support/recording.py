"""A stream that records what a reply showed while it was written, and one console turn asked with it."""

from __future__ import annotations

from typing import Any

from channels.base import InboundMessage


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def text(self, delta: str) -> None:
        self.events.append(("text", delta))

    def status(self, line: str) -> None:
        self.events.append(("status", line))


async def ask(rt: Any, text: str, recorder: Recorder | None = None) -> Any:
    reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", text), stream=recorder or Recorder())
    assert reply is not None
    return reply
