"""The start-up context probe: llama.cpp's GET /props and Ollama's /api/ps and /api/show lower the window, on either protocol."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.llm.context_probe import OLLAMA_DEFAULT_CONTEXT, probe_context, server_root
from bot.app.runtime import open_runtime
from tests.support.config import make_config

PROBE_LOGGER = "bot.llm.context_probe"


@asynccontextmanager
async def model_server(routes: dict[tuple[str, str], Any]) -> AsyncIterator[tuple[str, list[str]]]:
    """A server answering `routes` ((method, path) -> JSON body, or a coroutine function) and 404 elsewhere."""
    seen: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append(f"{request.method} {request.path}")
        answer = routes.get((request.method, request.path))
        if answer is None:
            return web.json_response({"error": {"message": "Not Found"}}, status=404)
        if callable(answer):
            return await answer(request)  # type: ignore[no-any-return]
        return web.json_response(answer)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def window_budget(tmp_path: Path, base_url: str, api: str, model: str = "qwen2.5:1.5b") -> int:
    config = make_config(tmp_path, llm={"api": api, "api-key": "", "base-url": base_url, "model": model})
    async with open_runtime(config, with_memory_worker=False) as rt:
        return rt.window.budget


def probe_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == PROBE_LOGGER and r.levelno >= logging.INFO]


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("props", [
    {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1},
    {"n_ctx": 4096},  # older llama-server builds
])
async def test_llama_server_context_lowers_the_window_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, api: str, props: dict[str, Any],
) -> None:
    caplog.set_level(logging.DEBUG, logger=PROBE_LOGGER)
    async with model_server({("GET", "/props"): props}) as (url, seen):
        budget = await window_budget(tmp_path, url + ("/v1" if api == "openai" else ""), api)

    assert budget == 4096
    (line,) = probe_lines(caplog)
    assert "lowered from 128000 to 4096" in line and "llama.cpp /props" in line
    assert seen == ["GET /props"]


@pytest.mark.parametrize(("routes", "expected", "source"), [
    ({("GET", "/api/ps"): {"models": [{"name": "qwen2.5:1.5b", "model": "qwen2.5:1.5b", "context_length": 8192}]},
      ("POST", "/api/show"): {"parameters": "num_ctx 2048", "model_info": {}}},
     8192, "Ollama /api/ps"),
    ({("GET", "/api/ps"): {"models": []},
      ("POST", "/api/show"): {"parameters": "stop \"<|im_end|>\"\nnum_ctx 16384\n",
                              "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}}},
     16384, "num_ctx"),
    ({("GET", "/api/ps"): {"models": []},
      ("POST", "/api/show"): {"model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}}},
     OLLAMA_DEFAULT_CONTEXT, "Ollama's default; the model sets no num_ctx"),
])
async def test_ollama_context_lowers_the_window(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, routes: dict[tuple[str, str], Any], expected: int,
    source: str,
) -> None:
    async with model_server(routes) as (url, _):
        budget = await window_budget(tmp_path, url + "/v1", "openai")

    assert budget == expected
    (line,) = probe_lines(caplog)
    assert f"to {expected}" in line and source in line


async def test_a_server_with_room_to_spare_changes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with model_server({("GET", "/props"): {"default_generation_settings": {"n_ctx": 262144}}}) as (url, _):
        assert await window_budget(tmp_path, url, "anthropic") == 128000
    assert probe_lines(caplog) == []


async def test_a_server_that_reports_nothing_is_left_alone_silently(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=PROBE_LOGGER)
    async with model_server({}) as (url, seen):  # OpenAI, OpenRouter...: neither route exists
        assert await window_budget(tmp_path, url + "/v1", "openai") == 128000
    assert probe_lines(caplog) == []
    assert [r.levelno for r in caplog.records if r.name == PROBE_LOGGER] == [logging.DEBUG] * 3
    assert seen == ["GET /props", "GET /api/ps", "POST /api/show"]


async def test_a_server_that_does_not_answer_delays_start_up_by_the_probe_timeout_only() -> None:
    stop = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await stop.wait()
        return web.json_response({})

    async with model_server({("GET", "/props"): hang}) as (url, _):
        started = time.monotonic()
        found = await probe_context(url, "m", timeout=0.3)
        elapsed = time.monotonic() - started
        stop.set()
    assert found is None and elapsed < 2


async def test_without_a_base_url_nothing_is_probed(tmp_path: Path) -> None:
    config = make_config(tmp_path, llm={"api": "openai", "api-key": "sk-x"})  # api.openai.com: not asked
    async with open_runtime(config, with_memory_worker=False) as rt:
        assert rt.window.budget == 128000


def test_server_root_drops_the_api_path() -> None:
    assert server_root("http://127.0.0.1:11434/v1") == "http://127.0.0.1:11434"
    assert server_root("http://127.0.0.1:8080/v1/") == "http://127.0.0.1:8080"
    assert server_root("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
