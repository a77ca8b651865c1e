"""Tool calls that a small local model writes as text, in every form it writes them (SPEC S21 local models, S34)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.llm.text_tool_calls import ReadReply, read_reply, text_tool_call
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


WRITE_ARGS = {"agentId": 1, "filename": "notes.md", "content": "Likes green tea."}
CALL = json.dumps({"name": "read_workspace_memory_file", "arguments": READ})
WRITE_CALL = json.dumps({"name": "write_workspace_memory_file", "arguments": WRITE_ARGS})


@pytest.mark.parametrize(("text", "calls", "beside"), [
    # several calls in one reply, each form small models write, in the order written
    (f"<tools>{CALL}</tools>\n<tools>{WRITE_CALL}</tools>", ["read", "write"], ""),
    (f"<tool_call>\n{WRITE_CALL}\n</tool_call>\n<tool_call>\n{CALL}\n</tool_call>", ["write", "read"], ""),
    (f"{CALL}\n{WRITE_CALL}", ["read", "write"], ""),
    (f"[{CALL}, {WRITE_CALL}]", ["read", "write"], ""),
    (f"```json\n{CALL}\n{WRITE_CALL}\n```", ["read", "write"], ""),
    (f"<tool_call>\n{CALL}\n{WRITE_CALL}\n</tool_call>", ["read", "write"], ""),
    # a call with text beside it: the text is kept, the call runs
    (f"{WRITE_CALL}\nI have noted that you like green tea.", ["write"], "I have noted that you like green tea."),
    (f"Let me note that. <tools>{WRITE_CALL}</tools> Done.", ["write"], "Let me note that. Done."),
    (f"Let me look.\n```json\n{CALL}\n```\nOne moment.", ["read"], "Let me look.\nOne moment."),
    (f"<function=read_workspace_memory_file>{json.dumps(READ)}</function>\nReading it.", ["read"], "Reading it."),
    ("<tool_call>\n<function=read_workspace_memory_file>\n<parameter=agentId>\n1\n</parameter>\n"
     "<parameter=filename>\nMEMORY.md\n</parameter>\n</function>\n</tool_call>", ["read"], ""),
    (json.dumps({"type": "function", "function": {"name": "read_workspace_memory_file",
                                                  "arguments": json.dumps(READ)}}), ["read"], ""),
    (json.dumps({"tool_calls": [{"type": "function", "function": {"name": "read_workspace_memory_file",
                                                                  "arguments": json.dumps(READ)}}]}), ["read"], ""),
    ("[TOOL_CALLS] " + json.dumps([{"name": "read_workspace_memory_file", "arguments": READ}]), ["read"], ""),
    # a tool that was not offered is no call, and its markup is taken out all the same
    (json.dumps({"name": "get_weather", "arguments": {"city": "Lyon"}}) + "\nIt is sunny.", [], "It is sunny."),
    (f"<tool_call>{json.dumps({'name': 'delete_everything', 'arguments': {}})}</tool_call>{CALL}", ["read"], ""),
])
def test_every_written_form_is_read_in_order(text: str, calls: list[str], beside: str) -> None:
    read = read_reply(text, OFFERED)
    assert [name.split("_")[0] for name, _ in read.calls] == calls
    assert all(arguments in (READ, WRITE_ARGS) for _, arguments in read.calls)
    assert read.text == beside and not read.imitated


@pytest.mark.parametrize("text", [
    '<tool_response>\n{"status": "saved", "filename": "notes.md"}\n</tool_response>\nSaved it!',
    "<tool_response>The file was written.</tool_response> All done.",
    '{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"} Saved.',
    '{"name": "write_workspace_memory_file", "content": "File written"}\nSaved.',
    '<tool_result>{"ok": true}',  # the end cut off
])
def test_an_imitated_tool_result_is_noticed_and_never_kept(text: str) -> None:
    read = read_reply(text, OFFERED)
    assert read.imitated and not read.calls
    assert "{" not in read.text and "<" not in read.text and "written" not in read.text.lower()


@pytest.mark.parametrize("text", [
    "```python\nprint({'name': 'read_workspace_memory_file', 'arguments': {}})\n```",
    'Here is the JSON: {"name": "Alice", "id": 3}',
    "Use [the docs](https://example.com) and a < b > c.",
    "Set x = [1, 2, 3] and y = {}.",
    "<b>bold</b> and <i>tool</i>, a <tag> of its own",
])
def test_ordinary_answers_stay_as_written(text: str) -> None:
    assert read_reply(text, OFFERED) == ReadReply(text.strip())


def test_without_markup_parsing_only_the_labels_go() -> None:
    text = f"[2026-12-03 10:46] Here: {CALL}"
    assert read_reply(text, OFFERED, markup=False) == ReadReply(f"Here: {CALL}")


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
