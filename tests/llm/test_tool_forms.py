"""mate.llm.tools (SPEC S34): compact tool schemas for small models, chosen by the key or, on
auto, by the context the model server reports; they stay at most 40 % of a first turn's prompt."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.app.runtime import Runtime, open_runtime
from bot.core.tools import compact_definitions
from bot.llm import AnthropicClient
from bot.llm.tokens import TokenEstimator
from memory.workspace.tool import _DEFINITIONS as WORKSPACE_DEFINITIONS
from tests.llm.test_llm_context_probe import model_server
from tests.support.cache_env import chat_requests
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.runtime import chat

COMPACT_SHARE = 0.40


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@asynccontextmanager
async def running(tmp_path: Path, fake: FakeAnthropic, **llm: Any) -> AsyncIterator[Runtime]:
    config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0, **llm})
    async with AnthropicClient(config.mate.llm) as client, open_runtime(config, llm=client) as rt:
        yield rt
        assert await rt.router.drain(10)


def shape(definition: dict[str, Any]) -> tuple[str, Any, Any, Any]:
    """What validates a call: the name, the parameters' names and types, the required ones."""
    schema = definition["input_schema"]
    types = {name: (p.get("type"), p.get("enum")) for name, p in schema.get("properties", {}).items()}
    return definition["name"], schema.get("type"), types, schema.get("required")


def text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "".join(b.get("text", "") if b.get("type") == "text" else json.dumps(b) for b in value)


def cold_prompt_shares(body: dict[str, Any]) -> tuple[int, int]:
    """(tokens of the tool definitions, tokens of the whole prompt) of one request."""
    tokens = TokenEstimator()
    tools = tokens.count_tools(body["tools"])
    rest = tokens.count_text(text_of(body["system"])) + sum(
        tokens.count_message(m["content"]) for m in body["messages"])
    return tools, tools + rest


async def first_turn(tmp_path: Path, fake: FakeAnthropic, form: str) -> dict[str, Any]:
    async with running(tmp_path / form, fake, tools=form) as rt:
        fake.reply_text("Hello!")
        await chat(rt, "hi, I am Sam")
    (request,) = [r for r in chat_requests(fake) if r.body.get("tools")][-1:]
    return request.body


async def test_compact_tools_are_at_most_40_percent_of_the_first_prompt(
    tmp_path: Path, fake: FakeAnthropic, capsys: pytest.CaptureFixture[str],
) -> None:
    full = await first_turn(tmp_path, fake, "full")
    compact = await first_turn(tmp_path, fake, "compact")

    full_tools, full_total = cold_prompt_shares(full)
    compact_tools, compact_total = cold_prompt_shares(compact)
    with capsys.disabled():  # the figure the README quotes
        print(f"\nfirst turn, default seeds: full tools {full_tools}/{full_total} tokens "
              f"({full_tools / full_total:.0%}), compact {compact_tools}/{compact_total} "
              f"({compact_tools / compact_total:.0%})")
    assert compact_tools / compact_total <= COMPACT_SHARE
    assert compact_tools < full_tools / 2
    # The same calls validate: names, parameter types and required fields are unchanged.
    assert [shape(d) for d in compact["tools"]] == [shape(d) for d in full["tools"]]
    assert full["system"] == compact["system"]


def test_compact_form_drops_prose_but_keeps_what_validates() -> None:
    short = {"edit_workspace_memory_file": "Edit a memory file."}
    compact = compact_definitions(WORKSPACE_DEFINITIONS, short)

    edit = next(d for d in compact if d["name"] == "edit_workspace_memory_file")
    assert edit["description"] == "Edit a memory file."
    assert edit["input_schema"]["properties"]["replaceAll"] == {"type": "boolean"}
    read = next(d for d in compact if d["name"] == "read_workspace_memory_file")
    assert read["description"] == "Read one workspace memory file: its full content, enabled flag, size and last update."
    assert "description" not in json.dumps([d["input_schema"] for d in compact])
    assert [shape(d) for d in compact] == [shape(d) for d in WORKSPACE_DEFINITIONS]
    assert WORKSPACE_DEFINITIONS[0]["input_schema"]["properties"]["agentId"]["description"]  # left as it was


def offered_descriptions(rt: Runtime) -> dict[str, str]:
    return {d["name"]: d["description"] for d in rt.agent.tool_definitions()}


@pytest.mark.parametrize(("setting", "n_ctx", "compact"), [
    ("auto", 8192, True), ("auto", 16384, True), ("auto", 32768, False),
    ("full", 8192, False), ("compact", 262144, True),
])
async def test_the_key_and_the_probed_context_choose_the_form(
    tmp_path: Path, setting: str, n_ctx: int, compact: bool,
) -> None:
    props = {"default_generation_settings": {"n_ctx": n_ctx}}
    async with model_server({("GET", "/props"): props}) as (url, seen):
        config = make_config(tmp_path, llm={"api": "openai", "api-key": "", "base-url": url + "/v1",
                                            "model": "qwen2.5:1.5b", "tools": setting})
        async with open_runtime(config, with_memory_worker=False) as rt:
            descriptions = offered_descriptions(rt)
    assert seen == ["GET /props"]
    assert (descriptions["read_workspace_memory_file"] == "Read one memory file.") is compact
    assert (len(descriptions["search_memory"]) < 100) is compact


async def test_auto_without_a_server_to_probe_follows_the_configured_window(tmp_path: Path) -> None:
    small = make_config(tmp_path, agent={"conversation": {"window": {"default-max-input-tokens": 12000}}})
    async with open_runtime(small, with_memory_worker=False) as rt:
        assert offered_descriptions(rt)["read_workspace_memory_file"] == "Read one memory file."
    async with open_runtime(make_config(tmp_path), with_memory_worker=False) as rt:
        assert offered_descriptions(rt)["read_workspace_memory_file"] != "Read one memory file."


def test_an_unknown_form_is_refused_with_the_key(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="tools"):
        make_config(tmp_path, llm={"tools": "tiny"})
