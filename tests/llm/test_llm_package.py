"""The model package's shape: one port, one module family per protocol, wrappers over any client.

A second protocol (an OpenAI-compatible client) must be one more module family beside the
Anthropic one: nothing shared may name a protocol, and no client may lean on another.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests.support.import_graph import ROOT, _cycles, _graph, _imports

PACKAGE = ROOT / "bot" / "llm"
# What every client and wrapper may build on, and what callers of any protocol share with it:
# the prompt cache's lifetimes and prefixes, token estimates.
SHARED = {"port", "failures", "slots", "safe_text", "attempts", "cache_lifetime", "chat_prefix", "memory_snapshot", "tokens"}
WRAPPERS = {"usage", "text_tool_calls"}  # work over any LLMClient
SDKS = {"anthropic", "openai"}  # a protocol's SDK, imported only inside its own family


def _family(module: str) -> str:
    return module.split("_")[0]  # anthropic_messages belongs to anthropic


def _llm_modules() -> dict[str, set[str]]:
    """bot.llm's modules (short names, __init__ left out) with the SDKs and bot.llm modules each imports."""
    paths = [path for path in sorted(PACKAGE.glob("*.py")) if path.name != "__init__.py"]
    names = {path.stem for path in paths}
    found: dict[str, set[str]] = {}
    for path in paths:
        imported = _imports(path, "bot.llm")
        found[path.stem] = {m.split(".")[0] for m in imported if m.split(".")[0] in SDKS} | {
            m.removeprefix("bot.llm.") for m in imported if m.removeprefix("bot.llm.") in names}
    return found


def test_the_package_has_a_port_and_one_module_per_part() -> None:
    assert {"port", "anthropic", "openai", "offline", "usage", "text_tool_calls"} <= set(_llm_modules())


def test_shared_modules_and_wrappers_name_no_protocol() -> None:
    modules = _llm_modules()
    assert modules, "bot/llm/ holds no modules"
    for name in SHARED | WRAPPERS:
        assert modules[name] <= SHARED, f"bot.llm.{name} imports {sorted(modules[name] - SHARED)}"


def test_a_client_leans_only_on_the_shared_modules_and_its_own_family() -> None:
    modules = _llm_modules()
    clients = set(modules) - SHARED - WRAPPERS
    assert {"anthropic", "offline"} <= clients
    for name in clients:
        allowed = SHARED | {m for m in clients if _family(m) == _family(name)} | ({_family(name)} & SDKS)
        assert modules[name] <= allowed, f"bot.llm.{name} imports {sorted(modules[name] - allowed)}"


def test_no_import_circle_passes_through_the_model_package() -> None:
    graph = _graph(("bot", "channels", "memory"))
    assert "bot.llm.port" in graph
    circles = [sorted(c) for c in _cycles(graph) if any(m == "bot.llm" or m.startswith("bot.llm.") for m in c)]
    assert circles == []


@pytest.mark.parametrize(("old", "new", "names"), [
    ("bot.llm", "bot.llm.port", ["LLMClient", "LLMRequest", "LLMResponse", "TextListener", "ToolCall"]),
    ("bot.llm", "bot.llm.anthropic", ["AnthropicClient"]),
    ("bot.llm", "bot.llm.offline", ["OfflineClient"]),
    ("bot.llm", "bot.llm.openai", ["OpenAIClient"]),
    ("bot.llm", "bot.llm.failures", ["is_prompt_too_long"]),
    ("bot.llm", "bot.llm.usage", ["UsageRecordingClient"]),
    ("bot.llm", "bot.llm.text_tool_calls", ["TextToolCallClient", "text_tool_call"]),
])
def test_the_old_import_paths_name_the_same_objects(old: str, new: str, names: list[str]) -> None:
    import importlib

    before, after = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        assert getattr(before, name) is getattr(after, name)


def test_offline_answers_without_loading_the_sdk() -> None:
    # The SDK takes over a second to import; a daemon with no model configured never pays it.
    script = (
        "import asyncio, sys\n"
        "from bot.llm import LLMRequest, OfflineClient, TextToolCallClient\n"
        "request = LLMRequest(model='m', system='', messages=[{'role': 'user', 'content': 'hi'}], max_tokens=5)\n"
        "answer = asyncio.run(TextToolCallClient(OfflineClient()).complete(request))\n"
        "print(answer.text, sorted(m for m in ('anthropic', 'openai') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(offline) hi []"
