"""How much context a local model server holds (llama.cpp `GET /props`, Ollama `/api/ps` and `/api/show`), asked once at start-up.

A server that holds less than `default-max-input-tokens` would silently drop the start of
long prompts (Ollama keeps 4 096 tokens unless told otherwise), so the window is lowered to
what the server reports, with one log line. Servers that report nothing (OpenAI,
OpenRouter, Anthropic) cost one quick refused request and a debug line.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bot.core.config import WindowConfig

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0  # for all the probe's requests together: start-up must not wait on a dead server
# Ollama's context when neither the model nor a loaded instance says otherwise (the smallest of
# its defaults: 4 096 below 24 GiB of VRAM, more above, or OLLAMA_CONTEXT_LENGTH).
OLLAMA_DEFAULT_CONTEXT = 4096
_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.M)


@dataclass(frozen=True, slots=True)
class ServerContext:
    tokens: int
    source: str  # where the figure came from, for the log line


def server_root(base_url: str) -> str:
    """The server's own address: base-url without the API path (/v1) the protocols add."""
    parts = urlsplit(base_url.strip().rstrip("/"))
    path = re.sub(r"/v1$", "", parts.path)
    return urlunsplit(parts._replace(path=path, query="", fragment=""))


async def probe_context(base_url: str, model: str, *, timeout: float = PROBE_TIMEOUT_S) -> ServerContext | None:
    """The context the server at `base_url` holds for `model`; None when it does not say."""
    import aiohttp

    root = server_root(base_url)
    try:
        async with asyncio.timeout(timeout), aiohttp.ClientSession() as session:
            return (await _llama_cpp(session, root) or await _ollama_loaded(session, root, model)
                    or await _ollama_model(session, root, model))
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
        log.debug("context probe of the model server: %s", type(exc).__name__)
        return None


async def _get_json(session: Any, method: str, url: str, payload: dict[str, Any] | None = None) -> Any:
    async with session.request(method, url, json=payload) as response:
        if response.status != 200:
            log.debug("context probe: %s %s answered %d", method, urlsplit(url).path, response.status)
            return None
        return await response.json(content_type=None)


async def _llama_cpp(session: Any, root: str) -> ServerContext | None:
    props = await _get_json(session, "GET", f"{root}/props")
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    for holder in (settings, props):  # per slot in current builds; at the top level in older ones
        tokens = _positive(holder.get("n_ctx")) if isinstance(holder, dict) else None
        if tokens is not None:
            return ServerContext(tokens, "llama.cpp /props n_ctx")
    return None


def _names(model: str) -> set[str]:
    return {model, f"{model}:latest"} if ":" not in model else {model}


async def _ollama_loaded(session: Any, root: str, model: str) -> ServerContext | None:
    """A model Ollama has loaded says the context it was loaded with."""
    running = await _get_json(session, "GET", f"{root}/api/ps")
    models = running.get("models") if isinstance(running, dict) else None
    for entry in models if isinstance(models, list) else []:
        if isinstance(entry, dict) and {entry.get("name"), entry.get("model")} & _names(model):
            tokens = _positive(entry.get("context_length"))
            if tokens is not None:
                return ServerContext(tokens, "Ollama /api/ps context_length")
    return None


async def _ollama_model(session: Any, root: str, model: str) -> ServerContext | None:
    shown = await _get_json(session, "POST", f"{root}/api/show", {"model": model})
    if not isinstance(shown, dict):
        return None
    parameters = shown.get("parameters")
    found = _NUM_CTX.search(parameters) if isinstance(parameters, str) else None
    if found and _positive(int(found.group(1))):
        return ServerContext(int(found.group(1)), "Ollama /api/show num_ctx")
    info = shown.get("model_info")
    if not isinstance(info, dict):
        return None
    trained = next((_positive(v) for k, v in info.items() if k.endswith(".context_length") and _positive(v)), None)
    if trained is None:
        return None
    return ServerContext(min(trained, OLLAMA_DEFAULT_CONTEXT),
                         "Ollama's default; the model sets no num_ctx")


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def fitted_window(window: WindowConfig, found: ServerContext | None, base_url: str) -> WindowConfig:
    """`window` with default-max-input-tokens lowered to the server's context, said in one log line."""
    if found is None or found.tokens >= window.default_max_input_tokens:
        return window
    parts = urlsplit(base_url.strip())
    address = f"{parts.scheme}://{parts.hostname or '?'}{f':{parts.port}' if parts.port else ''}"  # no credentials
    log.warning("the model server at %s holds %d tokens of context (%s): "
                "mate.agent.conversation.window.default-max-input-tokens lowered from %d to %d",
                address, found.tokens, found.source, window.default_max_input_tokens, found.tokens)
    return window.model_copy(update={"default_max_input_tokens": found.tokens})
