"""Tool calls that a small local model writes as JSON text (SPEC S21, local models)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.llm.text_tool_calls import text_tool_call
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.recording import Recorder
from tests.support.recording import ask
from tests.support.runtime import running

OFFERED = {"read_workspace_memory_file", "write_workspace_memory_file"}
READ = {"agentId": 1, "filename": "MEMORY.md"}


@pytest.mark.parametrize("text", [
    json.dumps({"name": "read_workspace_memory_file", "arguments": READ}),
    "```json\n" + json.dumps({"name": "read_workspace_memory_file", "arguments": READ}) + "\n```",
    "  ```\n" + json.dumps({"name": "read_workspace_memory_file", "input": READ}) + "\n```\n",
    json.dumps({"name": "read_workspace_memory_file", "arguments": json.dumps(READ)}),
    json.dumps({"type": "function", "name": "read_workspace_memory_file", "parameters": READ}),
    "<tool_call>\n" + json.dumps({"name": "read_workspace_memory_file", "arguments": READ}) + "\n</tool_call>",
    "<tools>" + json.dumps({"name": "read_workspace_memory_file", "arguments": READ}),  # the end cut off
    "<tool_response>```json\n" + json.dumps({"name": "read_workspace_memory_file", "arguments": READ})
    + "\n```</tool_response>",
])
def test_a_written_call_is_read(text: str) -> None:
    assert text_tool_call(text, OFFERED) == ("read_workspace_memory_file", READ)


@pytest.mark.parametrize("text", [
    json.dumps({"name": "delete_everything", "arguments": {}}),  # not offered
    json.dumps({"name": "read_workspace_memory_file", "arguments": [1]}),
    json.dumps({"name": "read_workspace_memory_file", "arguments": "{not json"}),
    json.dumps({"name": "read_workspace_memory_file", "arguments": READ, "reply": "hi"}),  # more than a call
    "Sure! " + json.dumps({"name": "read_workspace_memory_file", "arguments": READ}),  # not the whole reply
    "```python\n" + json.dumps({"name": "read_workspace_memory_file", "arguments": READ}) + "\n```",
    json.dumps([{"name": "read_workspace_memory_file"}]),
    '{"name": "read_workspace_memory_file", ',
    "<b>" + json.dumps({"name": "read_workspace_memory_file", "arguments": READ}) + "</b>",
    "",
])
def test_anything_else_is_an_answer(text: str) -> None:
    assert text_tool_call(text, OFFERED) is None


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


def options(fake: FakeAnthropic, mode: str) -> dict[str, Any]:
    return {"llm": {"api-key": "k", "base-url": fake.url, "max-retries": 0, "text-tool-calls": mode}}


WRITE = "```json\n" + json.dumps({"name": "write_workspace_memory_file", "arguments": {
    "agentId": 1, "filename": "notes.md", "content": "Likes green tea."}}) + "\n```"


async def test_a_written_call_runs_and_is_replayed_as_a_tool_call(tmp_path: Path, fake: FakeAnthropic) -> None:
    recorder = Recorder()
    async with running(tmp_path, fake, **options(fake, "auto")) as rt:  # auto: on, the base-url is ours
        fake.reply_text(WRITE)
        fake.reply_text("Saved it.")
        reply = await ask(rt, "remember that I like green tea", recorder)
        saved, _ = await rt.core.workspace.read_text(1, "notes.md")

    assert reply.text == "Saved it." and not reply.failure
    assert "Likes green tea." in saved
    second = fake.messages_requests()[1]["messages"]
    use = second[-2]["content"][0]
    assert use["type"] == "tool_use" and use["name"] == "write_workspace_memory_file"
    assert second[-1]["content"][0]["type"] == "tool_result"
    assert second[-1]["content"][0]["tool_use_id"] == use["id"]
    shown = "".join(t for kind, t in recorder.events if kind == "text")
    assert "{" not in shown and shown == "Saved it."  # the JSON never showed in the preview


async def test_off_keeps_the_text_as_the_answer(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, **options(fake, "off")) as rt:
        fake.reply_text(WRITE)
        reply = await ask(rt, "remember that I like green tea")

    assert reply.text == WRITE.strip() and len(fake.messages_requests()) == 1


async def test_a_code_answer_still_streams(tmp_path: Path, fake: FakeAnthropic) -> None:
    recorder = Recorder()
    code = "```python\nprint('hello world, this is a longer piece of code')\n```"
    async with running(tmp_path, fake, **options(fake, "on")) as rt:
        fake.reply_text(code)
        reply = await ask(rt, "show me code", recorder)

    texts = [t for kind, t in recorder.events if kind == "text"]
    assert reply.text == code and "".join(texts) == code and len(texts) >= 2


async def test_a_broken_stream_that_showed_nothing_is_a_plain_apology(tmp_path: Path, fake: FakeAnthropic) -> None:
    from tests.support.fakes.anthropic import TextReply

    written = json.dumps({"name": "read_workspace_memory_file", "arguments": READ})
    async with running(tmp_path, fake, **options(fake, "on")) as rt:
        fake.push(TextReply(written, break_after_chars=12))
        reply = await ask(rt, "read my memory")

    assert reply.failure == "llm" and "{" not in reply.text  # no half-written JSON shown or stored
    assert reply.text == rt.core.prompts.text("llm_error")
