"""A fake OpenAI-compatible speech-to-text endpoint (POST /v1/audio/transcriptions) on 127.0.0.1.

The wire format is OpenAI's, so the real `openai` SDK talks to it: a multipart form with
`file` (its name tells the format), `model`, optional `language` and `response_format`
-> `{"text": ...}` (json), the bare text (text) or `{task, language, duration, text,
segments}` (verbose_json); errors are `{"error": {message, type, param, code}}` with the HTTP
status, and a file whose name has no supported extension gets OpenAI's 400.

The transcript comes from the bytes: `spoken("hello")` makes a fake OGG/Opus note whose
transcript is "hello"; any other upload is heard as "note <first 8 hex of its sha256>", so
two notes are told apart. Tests set `fail_status` (every request answers it), `delay`
(seconds before answering), `hang` (no answer until release()), `html_body` (a 200 with an HTML
page, as a misrouted proxy gives) or `api_key` (requests without it get a 401).
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import BodyPartReader, web

SUPPORTED = ("flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm")
_SPEECH = b"FAKE-SPEECH:"


def spoken(text: str) -> bytes:
    """A fake OGG/Opus voice note whose transcript is `text`."""
    return b"OggS\x00\x02" + b"\x00" * 20 + b"OpusHead\x01\x01" + _SPEECH + text.encode("utf-8")


def heard(data: bytes) -> str:
    """What the fake hears in `data`."""
    at = data.find(_SPEECH)
    if at >= 0:
        return data[at + len(_SPEECH):].decode("utf-8", "replace")
    return f"note {hashlib.sha256(data).hexdigest()[:8]}"


@dataclass
class TranscriptionRequest:
    filename: str
    data: bytes
    model: str
    language: str | None
    response_format: str
    authorization: str


@dataclass
class FakeTranscription:
    """The server's state; `requests` records every well-formed request."""

    api_key: str = ""
    fail_status: int | None = None
    delay: float = 0.0
    hang: bool = False
    html_body: bool = False
    requests: list[TranscriptionRequest] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None
    _closing: asyncio.Event = field(default_factory=asyncio.Event)  # ends a hang: release(), or the server stopping

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> FakeTranscription:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def release(self) -> None:
        """Ends `hang`: the requests held answer now, later ones at once."""
        self.hang = False
        self._closing.set()

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        authorization = request.headers.get("Authorization", "")
        if self.api_key and authorization != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        if not request.content_type.startswith("multipart/form-data"):
            return _error(400, "Expected a multipart/form-data body.", "invalid_request_error")
        fields: dict[str, str] = {}
        upload: tuple[str, bytes] | None = None
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "file":
                upload = (part.filename or "", bytes(await part.read()))
            elif part.name:
                fields[part.name] = await part.text()
        if upload is None:
            return _error(400, "you must provide a 'file' field", "invalid_request_error", param="file")
        if not fields.get("model"):
            return _error(400, "you must provide a model parameter", "invalid_request_error", param="model")
        filename, data = upload
        if filename.rpartition(".")[2].lower() not in SUPPORTED:
            return _error(400, f"Invalid file format. Supported formats: {list(SUPPORTED)}",
                          "invalid_request_error", param="file")
        response_format = fields.get("response_format", "json")
        self.requests.append(TranscriptionRequest(filename, data, fields["model"], fields.get("language"),
                                                  response_format, authorization))
        if self.hang:
            await self._closing.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_status is not None:
            return _error(self.fail_status, "The server had an error while processing your request.", "server_error")
        if self.html_body:
            return web.Response(text="<html><body><h1>Welcome to nginx!</h1></body></html>", content_type="text/html")
        text = heard(data)
        if response_format == "text":
            return web.Response(text=text + "\n", content_type="text/plain")
        body: dict[str, Any] = {"text": text}
        if response_format == "verbose_json":
            body = {"task": "transcribe", "language": fields.get("language") or "english", "duration": 1.0,
                    "text": text, "segments": []}
        return web.json_response(body)


def _error(status: int, message: str, kind: str, code: str | None = None, param: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": param, "code": code}},
                             status=status)
