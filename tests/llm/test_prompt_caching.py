"""Prompt caching, usage rows and streaming at the agent, through the SDK and the fake Messages API (SPEC S21)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.core.clock import iso, utc_now
from tests.support.fakes.anthropic import FakeAnthropic, TextReply, system_text, untimed
from tests.support.messages import blocks
from tests.support.runtime import chat, running
from tests.support.window import CID
from tests.support.recording import Recorder

LABEL = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] ")


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


def marked(body: dict) -> list[str]:
    """Where the request puts its breakpoints: "system:<n>" and "message:<index>"."""
    found = [f"system:{i}" for i, b in enumerate(body["system"]) if b.get("cache_control")]
    for index, message in enumerate(body["messages"]):
        if any(b.get("cache_control") for b in blocks(message)):
            found.append(f"message:{index}")
    return found


async def test_a_conversation_reads_its_earlier_turns_from_the_cache(tmp_path: Path, fake: FakeAnthropic) -> None:
    long_fact = "My garden has " + ", ".join(f"plant number {i}" for i in range(400)) + "."
    async with running(tmp_path, fake) as rt:
        for text in (long_fact, "what grows there?", "and the tomatoes?", "thanks"):
            fake.reply_text(f"noted: {text[:20]}")
            await chat(rt, text)
        rows = await rt.core.repos.llm_usage.totals_since("1970")

    requests = fake.messages_requests()
    # tools + base prompt, then the workspace; the previous turn's last message
    assert marked(requests[0]) == ["system:0", "system:1"]
    assert marked(requests[1]) == ["system:0", "system:1", "message:1"]
    assert marked(requests[3]) == ["system:0", "system:1", "message:5"]
    # the system prompt is the same text every turn: the date, never the time
    assert len({system_text(r) for r in requests}) == 1
    assert "Today is" in system_text(requests[0]) and not re.search(r"\d{2}:\d{2}", system_text(requests[0]))
    # every user message keeps the time label it was first sent with, so older turns read as
    # they did in the request that cached them (SPEC S34)
    last = requests[3]["messages"]
    assert all(LABEL.match(blocks(m)[0]["text"]) for m in last if m["role"] == "user")
    assert blocks(last[-3])[0]["text"] == blocks(requests[2]["messages"][-1])[0]["text"]
    # turn 2 wrote the first exchange; turns 3 and 4 read it and the turns after it
    chat_rows = [r for r in rows if r.purpose == "chat"]
    assert len(chat_rows) == 1 and chat_rows[0].calls == 4
    assert chat_rows[0].cache_read_input_tokens > 2 * 1024
    assert chat_rows[0].cache_read_input_tokens > chat_rows[0].input_tokens


async def test_every_call_is_stored_with_its_usage(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake) as rt:
        fake.reply_tool_use("list_workspace_memory_files", {})
        fake.reply_text("done")
        await chat(rt, "what files do you keep?")
        rows = await rt.core.db.fetchall(
            "SELECT agent_id, conversation_id, purpose, model, input_tokens, cache_creation_input_tokens, "
            "cache_read_input_tokens, output_tokens, create_time FROM mate_llm_usage ORDER BY id")

    assert [(r["agent_id"], r["conversation_id"], r["purpose"]) for r in rows] == [(1, CID, "chat")] * 2
    assert all(r["input_tokens"] + r["cache_creation_input_tokens"] + r["cache_read_input_tokens"] > 0
               and r["output_tokens"] > 0 and r["model"] for r in rows)
    assert rows[0]["create_time"] <= iso(utc_now())


async def test_tool_rounds_read_the_round_before(tmp_path: Path, fake: FakeAnthropic) -> None:
    padding = "context " * 1500
    async with running(tmp_path, fake) as rt:
        fake.reply_tool_use("list_workspace_memory_files", {})
        fake.reply_text("done")
        await chat(rt, padding + "list them")

    first, second = fake.messages_requests()
    assert marked(first) == ["system:0", "system:1"]
    assert marked(second)[-1] == f"message:{len(second['messages']) - 1}"


async def test_the_answer_streams_and_tool_rounds_show_a_status(tmp_path: Path, fake: FakeAnthropic) -> None:
    from channels.base import InboundMessage

    recorder = Recorder()
    async with running(tmp_path, fake) as rt:
        fake.reply_tool_use("list_workspace_memory_files", {})
        fake.reply_text("Here is a long answer in several pieces, as a real model streams it.")
        reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", "files?"), stream=recorder)

    assert reply is not None and reply.text.startswith("Here is a long answer")
    texts = [t for kind, t in recorder.events if kind == "text"]
    assert len(texts) >= 2 and "".join(texts) == reply.text
    assert recorder.events[0] == ("status", "Working on it…")
    assert all(r.get("stream") for r in fake.messages_requests())


async def test_streaming_off_sends_plain_requests(tmp_path: Path, fake: FakeAnthropic) -> None:
    from channels.base import InboundMessage

    recorder = Recorder()
    llm = {"api-key": "k", "base-url": fake.url, "max-retries": 0, "stream": False}
    async with running(tmp_path, fake, llm=llm) as rt:
        fake.reply_text("whole")
        reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", "hi"), stream=recorder)

    assert reply is not None and reply.text == "whole"
    assert recorder.events == []
    assert not fake.messages_requests()[0].get("stream")


async def test_a_stream_that_breaks_keeps_what_was_shown(tmp_path: Path, fake: FakeAnthropic) -> None:
    from channels.base import InboundMessage

    recorder = Recorder()
    answer = "The first part arrived, and then the network went away before the rest."
    async with running(tmp_path, fake) as rt:
        fake.push(TextReply(answer, break_after_chars=10))
        reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", "tell me"), stream=recorder)
        fake.reply_text("second answer")
        again = await chat(rt, "go on")
        stored = [(r.role, r.content) for r in await rt.core.repos.messages.after(CID, 0)]

    shown = "".join(t for kind, t in recorder.events if kind == "text")
    assert shown and answer.startswith(shown) and shown != answer
    assert reply is not None and reply.failure == "llm"
    assert reply.text.startswith(shown.strip()) and "broke off" in reply.text
    assert stored[:2] == [("user", "tell me"), ("assistant", shown.strip())]
    assert again == "second answer"
    # the next request carries what the user saw
    history = fake.messages_requests()[-1]["messages"]
    assert [untimed(blocks(m)[0]["text"]) for m in history] == ["tell me", shown.strip(), "go on"]


async def test_status_shows_todays_tokens_per_purpose_and_the_cache_share(tmp_path: Path, fake: FakeAnthropic) -> None:
    long_fact = "My garden has " + ", ".join(f"plant number {i}" for i in range(400)) + "."
    async with running(tmp_path, fake) as rt:
        before = await chat(rt, "/status")
        for text in (long_fact, "what grows there?", "thanks"):
            fake.reply_text("ok")
            await chat(rt, text)
        after = await chat(rt, "/status")
        totals = await rt.core.repos.llm_usage.totals_since("1970")

    assert "no model calls yet" in before
    (row,) = totals
    share = round(100 * row.cache_read_input_tokens / row.prompt_tokens)
    assert share > 0
    assert f"chat: {row.prompt_tokens} in ({share}% from cache), {row.output_tokens} out, 3 calls" in after
    assert f"cache hit share: {share}% of {row.prompt_tokens} input tokens" in after
