"""No markup ever reaches a person (SPEC S34), through the whole pipeline on both protocols.

A small local model's replies, as Qwen2.5-Coder-1.5B under llama.cpp wrote them, are scripted
on the fake Messages API and the fake Chat Completions API; the runtime is built from the
configuration (a `base-url`, so written tool calls are parsed) and the real SDK clients talk to
the fakes. What the channel gets back from the router, what the stream showed while the reply
was written, and what the history keeps must hold no tool tags, no JSON tool call or result and
none of our labels; the calls written must have run, in order.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.app.runtime import Runtime, open_runtime
from bot.llm.memory_snapshot import FileChange
from channels.base import InboundMessage
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.openai_chat import FakeOpenAIChat

CID = "console:me"
WRITE, EDIT = "write_workspace_memory_file", "edit_workspace_memory_file"
TEA = {"agentId": 1, "filename": "notes.md", "content": "Likes green tea."}
JASMINE = {"agentId": 1, "filename": "notes.md", "oldText": "green", "newText": "jasmine"}


def call(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"name": name, "arguments": arguments})


@dataclass
class Lane:
    api: str
    fake: FakeAnthropic | FakeOpenAIChat
    base_url: str

    def bodies(self) -> list[dict[str, Any]]:
        return self.fake.messages_requests()

    def tool_results(self, body: dict[str, Any]) -> list[str]:
        """The tool results a request carries, in order (an error marked as such)."""
        if self.api == "anthropic":
            return [("Error: " if b.get("is_error") else "") + str(b["content"]) for m in body["messages"]
                    if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"]
        return [m["content"] for m in body["messages"] if m["role"] == "tool"]

    def texts(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """(role, text) of every message of a request."""
        found = []
        for message in body["messages"]:
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(str(b["text"]) for b in content if isinstance(b, dict) and b.get("type") == "text")
            found.append((message["role"], content or ""))
        return found


@pytest.fixture(params=["anthropic", "openai"])
async def lane(request: pytest.FixtureRequest) -> AsyncIterator[Lane]:
    if request.param == "anthropic":
        async with FakeAnthropic() as anthropic_fake:
            yield Lane("anthropic", anthropic_fake, anthropic_fake.url)
    else:
        async with FakeOpenAIChat() as openai_fake:
            yield Lane("openai", openai_fake, openai_fake.base_url)


@asynccontextmanager
async def running(tmp_path: Path, lane: Lane, **mate: Any) -> AsyncIterator[Runtime]:
    # text-tool-calls is left at auto: on, since the base-url names a server of our own
    llm = {"api": lane.api, "api-key": "sk-local", "base-url": lane.base_url, "max-retries": 0}
    async with open_runtime(make_config(tmp_path, llm=llm, **mate), with_memory_worker=False) as rt:
        yield rt


@dataclass
class Heard:
    """What the channel's stream showed while the reply was written."""

    pieces: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)

    def text(self, delta: str) -> None:
        self.pieces.append(delta)

    def status(self, line: str) -> None:
        self.statuses.append(line)


async def say(rt: Runtime, text: str, heard: Heard | None = None) -> str:
    reply = await rt.router.handle(InboundMessage("console", "me", "me", "Me", text), stream=heard or Heard())
    assert reply is not None
    return reply.text


TAG = re.compile(r"</?(?:tool_call|tools|tool_response|tool_result|function)\b|<function=", re.I)
TIME_LABEL = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]")


def markup_in(text: str, rt: Runtime) -> list[str]:
    """Tool tags, JSON tool calls or results, and our labels found in `text` (empty: none)."""
    found = [m.group() for m in TAG.finditer(text)] + [m.group() for m in TIME_LABEL.finditer(text)]
    header = rt.core.prompts.render("agent/memory-updated", changes=[])
    found += [header] if header in text else []
    decoder = json.JSONDecoder()
    for index in (i for i, char in enumerate(text) if char == "{"):
        try:
            value, _ = decoder.raw_decode(text, index)
        except ValueError:
            continue
        if isinstance(value, dict) and ({"name", "arguments", "tool_use_id", "status"} & set(value)):
            found.append(json.dumps(value))
    return found


async def assert_nothing_shown(rt: Runtime, reply: str, heard: Heard) -> None:
    assert not markup_in(reply, rt), reply
    assert not markup_in("".join(heard.pieces), rt), heard.pieces
    for message in await rt.core.repos.messages.after(CID, 0):
        if message.role == "assistant" and message.content_format == "text":
            assert not markup_in(message.content, rt), message.content


async def notes(rt: Runtime) -> str:
    text, _ = await rt.core.workspace.read_text(1, "notes.md")
    return text


async def test_several_calls_in_one_reply_all_run_in_order(tmp_path: Path, lane: Lane) -> None:
    heard = Heard()
    async with running(tmp_path, lane) as rt:
        lane.fake.reply_text(f"<tools>{call(WRITE, TEA)}</tools>\n<tools>{call(EDIT, JASMINE)}</tools>")
        lane.fake.reply_text("Noted: you like jasmine tea.")
        reply = await say(rt, "remember that I like green tea, no, jasmine tea", heard)
        saved = await notes(rt)
        await assert_nothing_shown(rt, reply, heard)

    assert reply == "Noted: you like jasmine tea."
    assert "Likes jasmine tea." in saved  # the edit ran after the write it edits
    first, second = lane.bodies()
    results = lane.tool_results(second)
    assert len(results) == 2 and not any(r.startswith("Error") for r in results), results


@pytest.mark.parametrize("written", [
    pytest.param(f"<tool_call>\n{call(WRITE, TEA)}\n</tool_call>", id="tool_call"),
    pytest.param(f"<tools>{call(WRITE, TEA)}</tools>", id="tools"),
    pytest.param(f"<function={WRITE}>{json.dumps(TEA)}</function>", id="function="),
    pytest.param(f"```json\n{call(WRITE, TEA)}\n```", id="fenced-json"),
    pytest.param(f"Let me note that.\n{call(WRITE, TEA)}", id="text-then-call"),
    pytest.param(f"{call(WRITE, TEA)}\nI will remember that you like green tea.", id="call-then-text"),
])
async def test_each_written_form_runs_and_shows_no_markup(tmp_path: Path, lane: Lane, written: str) -> None:
    heard = Heard()
    async with running(tmp_path, lane) as rt:
        lane.fake.reply_text(written)
        lane.fake.reply_text("Saved: you like green tea.")
        reply = await say(rt, "remember that I like green tea", heard)
        saved = await notes(rt)
        await assert_nothing_shown(rt, reply, heard)

    assert reply == "Saved: you like green tea."
    assert "Likes green tea." in saved
    assert len(lane.tool_results(lane.bodies()[1])) == 1


async def test_the_text_beside_a_call_is_kept(tmp_path: Path, lane: Lane) -> None:
    heard = Heard()
    async with running(tmp_path, lane) as rt:
        lane.fake.reply_text(f"<tools>{call(WRITE, TEA)}</tools>\nI will remember that you like green tea.")
        lane.fake.reply_text("")  # nothing more after the tool's result
        reply = await say(rt, "remember that I like green tea", heard)
        saved = await notes(rt)
        await assert_nothing_shown(rt, reply, heard)

    assert reply == "I will remember that you like green tea."
    assert "Likes green tea." in saved
    second = lane.bodies()[1]
    assistant = [text for role, text in lane.texts(second) if role == "assistant"]
    assert assistant[-1] == "I will remember that you like green tea."  # replayed as written, less the call


async def test_an_imitated_tool_result_is_asked_again_once(tmp_path: Path, lane: Lane) -> None:
    heard = Heard()
    async with running(tmp_path, lane) as rt:
        lane.fake.reply_text('<tool_response>\n{"status": "saved", "filename": "notes.md"}\n</tool_response>\n'
                             "I saved that you like green tea.")
        lane.fake.reply_text("I have not saved it yet. Shall I note that you like green tea?")
        reply = await say(rt, "remember that I like green tea", heard)
        correction = rt.core.prompts.render("agent/tool-result-imitated")
        rows = [(m.role, m.content) for m in await rt.core.repos.messages.after(CID, 0)]
        await assert_nothing_shown(rt, reply, heard)

    assert reply == "I have not saved it yet. Shall I note that you like green tea?"
    first, second = lane.bodies()
    assert lane.texts(second)[-1] == ("user", correction)
    assert lane.texts(second)[-2][0] == "assistant" and "<tool_response>" in lane.texts(second)[-2][1]
    # the history keeps the answer the person got: neither the imitation nor the correction
    assert rows == [("user", "remember that I like green tea"), ("assistant", reply)]


async def test_a_second_imitation_gets_a_plain_apology(tmp_path: Path, lane: Lane) -> None:
    heard = Heard()
    async with running(tmp_path, lane) as rt:
        lane.fake.reply_text("<tool_response>saved</tool_response>")
        lane.fake.reply_text('Done. {"type": "tool_result", "tool_use_id": "call_1", "content": "saved"}')
        reply = await say(rt, "remember that I like green tea", heard)
        apology = rt.core.prompts.text("tool_result_imitated")
        await assert_nothing_shown(rt, reply, heard)

    assert reply == apology
    assert len(lane.bodies()) == 2


async def test_an_echoed_time_label_is_taken_out(tmp_path: Path, lane: Lane) -> None:
    heard = Heard()
    async with running(tmp_path, lane) as rt:
        lane.fake.reply_text("[2026-12-03 10:46] Hello! How can I help?")
        reply = await say(rt, "hello", heard)
        sent = lane.texts(lane.bodies()[0])[-1][1]
        await assert_nothing_shown(rt, reply, heard)

    assert TIME_LABEL.match(sent)  # the label the model echoed is the one we put on the user's message
    assert reply == "Hello! How can I help?" and "".join(heard.pieces) == reply


async def test_an_echoed_memory_note_is_taken_out(tmp_path: Path, lane: Lane) -> None:
    heard = Heard()
    async with running(tmp_path, lane) as rt:
        note = rt.core.prompts.render("agent/memory-updated", changes=[
            FileChange("PROFILE.md", ("- Likes green tea",), ("- Likes coffee",))])
        lane.fake.reply_text(f"{note}\n\nHello again! You like green tea now.")
        reply = await say(rt, "hello", heard)
        await assert_nothing_shown(rt, reply, heard)

    assert reply == "Hello again! You like green tea now."


async def test_a_call_to_a_tool_not_offered_is_not_shown_or_run(tmp_path: Path, lane: Lane) -> None:
    heard = Heard()
    async with running(tmp_path, lane) as rt:
        lane.fake.reply_text(call("get_weather", {"city": "Lyon"}) + "\nIt should be sunny in Lyon.")
        reply = await say(rt, "weather in Lyon?", heard)
        await assert_nothing_shown(rt, reply, heard)

    assert reply == "It should be sunny in Lyon." and len(lane.bodies()) == 1


async def test_with_text_tool_calls_off_only_the_labels_go(tmp_path: Path, lane: Lane) -> None:
    written = f"[2026-12-03 10:46] {call(WRITE, TEA)}"
    llm = {"api": lane.api, "api-key": "sk-local", "base-url": lane.base_url, "max-retries": 0,
           "text-tool-calls": "off"}
    async with open_runtime(make_config(tmp_path, llm=llm), with_memory_worker=False) as rt:
        lane.fake.reply_text(written)
        reply = await say(rt, "remember that I like green tea")

    assert reply == call(WRITE, TEA) and len(lane.bodies()) == 1


async def test_the_web_stream_shows_no_markup(tmp_path: Path) -> None:
    from tests.support.api_env import open_api

    async for api in open_api(tmp_path):
        api.fake.reply_text(f"Let me note that. <tools>{call(WRITE, TEA)}</tools>")
        api.fake.reply_text("[2026-12-03 10:46] Saved: you like green tea.")
        async with api.http.post(api.url + "/api/v1/chat/1/stream", json={"message": "remember: green tea"},
                                 headers=api.auth()) as response:
            raw = await response.text()
        saved, _ = await api.rt.core.workspace.read_text(1, "notes.md")
        events = [(block.split("\n")[0].removeprefix("event: "), json.loads(block.split("\n")[1][6:]))
                  for block in raw.strip().split("\n\n")]
        deltas = "".join(data["text"] for kind, data in events if kind == "delta")
        done = events[-1][1]
        assert not markup_in(deltas, api.rt) and not markup_in(done["reply"], api.rt)

    assert done["reply"] == "Saved: you like green tea." and "Likes green tea." in saved


async def test_no_more_calls_of_one_reply_run_than_max_tool_rounds(tmp_path: Path, lane: Lane) -> None:
    written = "\n".join(f"<tools>{call(WRITE, {**TEA, 'filename': f'{name}.md'})}</tools>" for name in "abc")
    async with running(tmp_path, lane, agent={"max-tool-rounds": 2}) as rt:
        lane.fake.reply_text(written)
        lane.fake.reply_text("Saved two of them.")
        reply = await say(rt, "save these three notes")
        files = {f.filename for f in await rt.core.workspace.list(1, "")}
        not_run = rt.core.prompts.text("tool_not_run")

    assert reply == "Saved two of them."
    assert {"a.md", "b.md"} <= files and "c.md" not in files
    results = lane.tool_results(lane.bodies()[1])
    assert len(results) == 3 and not_run in results[2] and not_run not in results[0] + results[1]
