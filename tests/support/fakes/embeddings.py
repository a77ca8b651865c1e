"""A fake OpenAI-compatible embeddings endpoint (POST /v1/embeddings) that computes real vectors.

Vectors are hashed character n-grams of the words (3- and 4-grams of "#word#"), so texts
sharing stems are near ("photographs" / "photography") and unrelated ones are not. The wire
format is OpenAI's, so the real `openai` SDK talks to it: `{model, input: str | [str],
encoding_format}` -> `{object: "list", data: [{object: "embedding", index, embedding}], model,
usage}`; errors are `{"error": {message, type, code}}` with the HTTP status. It records every
request, checks the bearer key, and can be told to fail or to hang.

Standalone (for bench/recall_locomo.py --embeddings): `python -m tests.support.fakes.embeddings --port 8099`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import math
import re
import socket
import struct
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

DIM = 256
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def ngram_vector(text: str, dim: int = DIM) -> list[float]:
    """Unit vector of the text's hashed character 3- and 4-grams (each word padded with #)."""
    vector = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        padded = f"#{word}#"
        for size in (3, 4):
            for start in range(max(1, len(padded) - size + 1)):
                digest = hashlib.blake2b(padded[start:start + size].encode(), digest_size=8).digest()
                slot = int.from_bytes(digest[:4], "little") % dim
                vector[slot] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


@dataclass
class EmbeddingRequest:
    model: str
    inputs: list[str]
    authorization: str


@dataclass
class FakeEmbeddings:
    """The server's state; tests set `fail_status` (every request answers it), `hang` (no
    answer until cleared) or `api_key` (requests without it get a 401)."""

    api_key: str = ""
    fail_status: int | None = None
    hang: bool = False
    requests: list[EmbeddingRequest] = field(default_factory=list)
    refuse_containing: str | None = None  # a 400 for any request whose input holds this text
    _runner: web.AppRunner | None = None
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def texts(self) -> list[str]:
        return [text for request in self.requests for text in request.inputs]

    async def __aenter__(self) -> FakeEmbeddings:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.hang = False
        if self._runner is not None:
            await self._runner.cleanup()

    async def _embeddings(self, request: web.Request) -> web.Response:
        authorization = request.headers.get("Authorization", "")
        while self.hang:
            await asyncio.sleep(0.05)
        if self.api_key and authorization != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "We could not parse the JSON body of your request.", "invalid_request_error")
        raw = body.get("input") if isinstance(body, dict) else None
        inputs = [raw] if isinstance(raw, str) else raw
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) and t for t in inputs):
            return _error(400, "'input' must be a non-empty string or array of non-empty strings.",
                          "invalid_request_error")
        model = str(body.get("model") or "")
        self.requests.append(EmbeddingRequest(model, list(inputs), authorization))
        if self.fail_status is not None:
            return _error(self.fail_status, "The server had an error while processing your request.", "server_error")
        if self.refuse_containing and any(self.refuse_containing in t for t in inputs):
            return _error(400, "This model's maximum context length was exceeded.", "invalid_request_error")
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(inputs):
            vector = ngram_vector(text)
            embedding: Any = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode() if as_base64 \
                else vector
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(len(_WORD.findall(t)) for t in inputs)
        return web.json_response({"object": "list", "data": data, "model": model,
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


def _error(status: int, message: str, kind: str, code: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": code}},
                             status=status)


async def _serve(port: int) -> None:
    async with FakeEmbeddings(port=port) as fake:
        print(f"fake embeddings: {fake.base_url}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a fake OpenAI-compatible embeddings server (hashed n-grams)")
    parser.add_argument("--port", type=int, default=8099)
    asyncio.run(_serve(parser.parse_args().port))
