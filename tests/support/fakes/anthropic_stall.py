"""The fakes' answers that start and do not end: stuck or endless model streams, bodies that never finish."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class StalledReply:
    """A streamed answer that starts and does not end: message_start and `text`, then every
    `beat_every` seconds a ping (or `beat_text` as more text) — None: silence — until the
    client gives up or `release` is set (then it ends normally). A request that does not
    stream gets no answer until `release` is set."""

    text: str = ""
    beat_every: float | None = None
    beat_text: str = ""
    release: asyncio.Event | None = None
    delay: float = 0.0


async def serve_stall(
    request: web.Request, body: dict[str, Any], script: StalledReply, message_id: str, headers: dict[str, str],
) -> web.StreamResponse:
    """Answer `request` as `script` says; the client leaving (handler_cancellation) ends it too."""
    release = script.release or asyncio.Event()
    message: dict[str, Any] = {
        "id": message_id, "type": "message", "role": "assistant", "model": str(body.get("model", "claude-fake")),
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}
    if not body.get("stream"):
        await release.wait()
        content = [{"type": "text", "text": script.text or "released"}]
        return web.json_response({**message, "content": content, "stop_reason": "end_turn"}, headers=headers)
    response = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
    await response.prepare(request)

    async def send(event: str, data: dict[str, Any]) -> None:
        await response.write(f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n".encode())

    async def text(piece: str) -> None:
        await send("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})

    await send("message_start", {"message": message})
    await send("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    if script.text:
        await text(script.text)
    while not release.is_set():
        try:
            await asyncio.wait_for(release.wait(), script.beat_every)
        except TimeoutError:
            try:
                await (text(script.beat_text) if script.beat_text else send("ping", {}))
            except ConnectionResetError:  # the client gave up between two beats
                return response
    await send("content_block_stop", {"index": 0})
    await send("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                 "usage": {"output_tokens": 1}})
    await send("message_stop", {})
    await response.write_eof()
    return response



@dataclass(frozen=True)
class DribbleReply:
    """A 200 whose headers come at once and whose body never ends: `body` one byte every
    `every` seconds, over and over (httpx's read timeout restarts with each byte)."""

    content_type: str = "application/json"
    body: bytes = b'{"id": "msg_dribble", "type": "message", "content": []}   '
    every: float = 0.1


async def serve_dribble(request: web.Request, script: DribbleReply) -> web.StreamResponse:
    """Dribble until the client leaves (handler_cancellation ends this too)."""
    response = web.StreamResponse(headers={"Content-Type": script.content_type})
    await response.prepare(request)
    try:
        while True:
            for byte in script.body:
                await response.write(bytes([byte]))
                await asyncio.sleep(script.every)
    except (ConnectionResetError, RuntimeError):  # the client gave up between two bytes
        return response
