"""`matebot chat` beside a running daemon: the console chat through the daemon's own API.

The daemon holds the database (one matebot per database), so a second process cannot
open it; it talks to the running one instead, through the streaming chat route, with the
API token the daemon keeps in data/api-token.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from bot.app.api.token import TOKEN_FILE
from bot.core.config import Config
from bot.core.errors import MateError
from bot.app.instance_lock import DatabaseLock
from channels.console import LineCut, LineInput, StreamLineInput, open_line_input

QUIT = ("/quit", "/exit")


def daemon_running(config: Config) -> bool:
    """True while another matebot holds this database's lock."""
    try:
        with DatabaseLock(config.mate.database.path):
            return False
    except MateError:
        return True


def api_token(config: Config) -> str:
    configured = config.mate.api.token.strip()
    if configured:
        return configured
    path = Path(config.mate.database.path).parent / TOKEN_FILE
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


async def attach(config: Config, agent_id: int, *, reader: asyncio.StreamReader | None = None,
                 output: TextIO | None = None) -> int:
    """Chat with the running daemon until end of input or /quit; the exit code."""
    out = output or sys.stdout
    api = config.mate.api
    host = "127.0.0.1" if api.host in ("0.0.0.0", "::", "") else api.host
    netloc = f"[{host}]" if ":" in host else host
    base = f"http://{netloc}:{api.port}/api/v1/chat/{agent_id}/stream"
    headers = {"Authorization": f"Bearer {api_token(config)}"}
    lines: LineInput = StreamLineInput(reader, out) if reader is not None else open_line_input(out)
    conversation: str | None = None
    write = _Writer(out)
    write(f"(talking to the running matebot at {host}:{api.port}; /quit to leave)\n")
    # No total limit: a reply with long tool rounds may take minutes; the daemon has its own.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as http:
        with lines.owning_terminal():  # on a terminal: long lines, pastes, logs above the prompt
            while True:
                try:
                    line = await lines.read("you> ")
                except LineCut:
                    write("(that line did not arrive whole, so it was not sent)\n")
                    continue
                if line is None:
                    write("\n")
                    return 0
                text = line.strip()
                if not text:
                    continue
                if text in QUIT:
                    return 0
                body: dict[str, Any] = {"message": text}
                if conversation:
                    body["conversationId"] = conversation
                try:
                    conversation = await _one_turn(http, base, body, write) or conversation
                except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                    write(f"\n(the running matebot did not answer: {type(exc).__name__})\n")
                    return 1


async def _one_turn(http: aiohttp.ClientSession, url: str, body: dict[str, Any], write: _Writer) -> str | None:
    async with http.post(url, json=body) as response:
        if response.status != 200:
            try:
                detail = (await response.json(content_type=None) or {}).get("msg", response.reason)
            except ValueError:  # not JSON: a proxy's page
                detail = response.reason
            write(f"(refused: HTTP {response.status} {detail})\n")
            return None
        printed = ""
        event = ""
        async for raw in response.content:
            line = raw.decode("utf-8").rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if event == "delta":
                    printed += data["text"]
                    write(data["text"])
                elif event == "done":
                    reply = str(data.get("reply", ""))
                    shown = printed.strip()
                    write(reply[len(shown):] if shown and reply.startswith(shown) else ("\n" if printed else "") + reply)
                    write("\n")
                    conversation = data.get("conversationId")
                    return conversation if isinstance(conversation, str) else None
        return None


class _Writer:
    def __init__(self, out: TextIO) -> None:
        self._out = out

    def __call__(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()
