"""Agent: LLM errors, usage calibration and the tool loop, through the fake Messages API (SPEC S5, S9, S14)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.llm.tokens import PER_MESSAGE_OVERHEAD, TIME_LABEL_TOKENS
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.messages import blocks, texts
from tests.support.runtime import chat, running
from tests.support.window import CID, blank_workspace, estimate_without_current


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


def tool_results(body: dict) -> list[dict]:
    last = body["messages"][-1]
    assert last["role"] == "user"
    return [b for b in blocks(last) if b["type"] == "tool_result"]


# -- LLM errors ----------------------------------------------------------------------------


async def test_rate_limit_and_overload_are_retried_by_the_sdk(tmp_path: Path, fake: FakeAnthropic) -> None:
    llm = {"api-key": "k", "base-url": fake.url, "max-retries": 2}
    async with running(tmp_path, fake, llm=llm) as rt:
        fake.reply_error(429, "rate_limit_error", "slow down", retry_after=0.001)
        fake.reply_error(529, "overloaded_error", "Overloaded", retry_after=0.001)
        fake.reply_text("made it")
        reply = await chat(rt, "hello")
        stored = [(r.role, r.content) for r in await rt.core.repos.messages.after(CID, 0)]

    assert reply == "made it"
    assert len(fake.messages_requests()) == 3
    assert fake.pending() == 0
    assert stored == [("user", "hello"), ("assistant", "made it")]


@pytest.mark.parametrize("failure", ["server_error", "disconnect"])
async def test_llm_failure_gives_an_apology_and_keeps_going(
    tmp_path: Path, fake: FakeAnthropic, failure: str,
) -> None:
    async with running(tmp_path, fake) as rt:  # max-retries 0
        if failure == "server_error":
            fake.reply_error(500, "api_error", "Internal server error")
        else:
            fake.reply_disconnect()
        reply = await chat(rt, "hello")
        fake.reply_text("back again")
        second = await chat(rt, "still there?")
        stored = [(r.role, r.content) for r in await rt.core.repos.messages.after(CID, 0)]
        apology = rt.core.prompts.text("llm_error")

    assert reply == apology
    assert second == "back again"
    assert stored == [("user", "hello"), ("user", "still there?"), ("assistant", "back again")]
    # the unanswered message is still history for the next request
    assert [t for m in fake.messages_requests()[-1]["messages"] for t in texts(m)] == [
        "hello", "still there?"]


# -- calibration -----------------------------------------------------------------------


async def test_usage_calibrates_the_token_factor(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake) as rt:
        model = rt.agent.model
        await blank_workspace(rt)
        assert rt.tokens.factor(model) == 1.0
        # reports three quarters of our estimate (the fake's own count of the tool definitions
        # is above it, as the API's is): moves the factor down
        estimate = (rt.tokens.count_text(await rt.agent.system_prompt(1, "Mate"))
                    + rt.tokens.count_tools(rt.agent.tool_definitions()) + rt.tokens.count_text("warm up")
                    + PER_MESSAGE_OVERHEAD + TIME_LABEL_TOKENS)
        fake.reply_text("ok", input_tokens=estimate * 3 // 4)
        await chat(rt, "warm up")
        low = rt.tokens.factor(model)
        assert low < 1.0

        # the current message goes with its time label
        estimate = (await estimate_without_current(rt) + rt.tokens.count_text("first") + PER_MESSAGE_OVERHEAD
                    + TIME_LABEL_TOKENS)
        fake.reply_text("one", input_tokens=3 * estimate)
        await chat(rt, "first")
        once = rt.tokens.factor(model)

        estimate = (await estimate_without_current(rt) + rt.tokens.count_text("second") + PER_MESSAGE_OVERHEAD
                    + TIME_LABEL_TOKENS)
        fake.reply_text("two", input_tokens=3 * estimate)
        await chat(rt, "second")
        twice = rt.tokens.factor(model)

    assert once == pytest.approx(low + 0.3 * (3 - low), abs=0.01)
    assert twice == pytest.approx(once + 0.3 * (3 - once), abs=0.01)
    assert low < once < twice < 3


# -- the tool loop -----------------------------------------------------------------------


async def test_memory_tool_result_goes_back_to_the_model(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake) as rt:
        await rt.core.workspace.write(1, "PROFILE.md", "Name: Ada\nLikes: tea")
        fake.reply_tool_use("read_workspace_memory_file", {"agentId": 1, "filename": "PROFILE.md"},
                            tool_use_id="toolu_read1", text="Let me look.")
        fake.reply_text("You are Ada and you like tea.")
        reply = await chat(rt, "what do you know about me?")
        stored = await rt.core.repos.messages.after(CID, 0)

    assert reply == "You are Ada and you like tea."
    first, second = fake.messages_requests()
    assert [t["name"] for t in first["tools"]] == [
        "list_workspace_memory_files", "read_workspace_memory_file",
        "write_workspace_memory_file", "edit_workspace_memory_file", "search_memory",
        "schedule_task", "list_tasks", "cancel_task"]
    (result,) = tool_results(second)
    assert result["tool_use_id"] == "toolu_read1"
    assert not result.get("is_error")
    assert "Likes: tea" in json.dumps(result["content"])
    previous = second["messages"][-2]
    assert previous["role"] == "assistant"
    assert [b["type"] for b in blocks(previous)] == ["text", "tool_use"]
    assert [r.role for r in stored] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("preamble", [None, "Let me look."])
async def test_stored_tool_exchange_replays_as_blocks(
    tmp_path: Path, fake: FakeAnthropic, preamble: str | None,
) -> None:
    async with running(tmp_path, fake) as rt:
        fake.reply_tool_use("read_workspace_memory_file", {"agentId": 1, "filename": "PROFILE.md"},
                            tool_use_id="toolu_read1", text=preamble)
        fake.reply_text("done")
        await chat(rt, "read my profile")
        fake.reply_text("sure")
        await chat(rt, "thanks")

    replay = fake.messages_requests()[-1]["messages"]
    assert [m["role"] for m in replay] == ["user", "assistant", "user", "assistant", "user"]
    assert blocks(replay[1])[-1]["type"] == "tool_use"
    assert blocks(replay[1])[-1]["id"] == "toolu_read1"
    assert blocks(replay[2])[0]["tool_use_id"] == "toolu_read1"


async def test_unknown_tool_gets_an_error_result(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake) as rt:
        fake.reply_tool_use("launch_rockets", {"count": 3}, tool_use_id="toolu_x")
        fake.reply_text("I cannot do that.")
        reply = await chat(rt, "launch")

    (result,) = tool_results(fake.messages_requests()[1])
    assert result["tool_use_id"] == "toolu_x"
    assert result["is_error"] is True
    assert "launch_rockets" in json.dumps(result["content"])
    assert reply == "I cannot do that."


@pytest.mark.parametrize("raw", ['"oops"', "[1, 2]"])
async def test_malformed_tool_input_gets_an_error_result(tmp_path: Path, fake: FakeAnthropic, raw: str) -> None:
    async with running(tmp_path, fake) as rt:
        fake.reply_raw_tool_use("read_workspace_memory_file", raw, tool_use_id="toolu_bad")
        fake.reply_text("Sorry, my tool call was wrong.")
        reply = await chat(rt, "read my profile")
        fake.reply_text("fine")
        after = await chat(rt, "ok")

    (result,) = tool_results(fake.messages_requests()[1])
    assert result["tool_use_id"] == "toolu_bad"
    assert result["is_error"] is True
    assert reply == "Sorry, my tool call was wrong."
    assert after == "fine"


async def test_malformed_tool_input_emits_no_warning(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake) as rt:
        fake.reply_raw_tool_use("read_workspace_memory_file", "[1, 2]", tool_use_id="toolu_bad")
        fake.reply_text("Sorry, my tool call was wrong.")
        reply = await chat(rt, "read my profile")

    assert reply == "Sorry, my tool call was wrong."


async def test_tool_rounds_are_bounded(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, agent={"max-tool-rounds": 2}) as rt:
        for _ in range(3):
            fake.reply_tool_use("list_workspace_memory_files", {"agentId": 1})
        reply = await chat(rt, "loop forever")
        exceeded = rt.core.prompts.text("tool_rounds_exceeded")
        fake.reply_text("next")
        assert await chat(rt, "hello again") == "next"

    requests = fake.messages_requests()
    assert len(requests) == 4  # 3 for the looping turn (1 + max-tool-rounds), 1 for the next
    assert reply == exceeded
    for body in requests[1:3]:
        assert len(tool_results(body)) == 1
