"""The prompt cache's lifetime by use (`mate.llm.cache`), through the agent, the SDK and the fake Messages API."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.core.config import LlmConfig, parse_config
from bot.core.errors import ConfigError
from bot.llm import AnthropicClient, LLMRequest
from bot.app.runtime import Runtime, open_runtime
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.anthropic_billing import cache_problem
from tests.support.runtime import chat
from tests.support.cache_env import Moment, START, chat_requests, controls, lifetimes

LONG_FACT = "My garden has " + ", ".join(f"plant number {i}" for i in range(400)) + "."


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@asynccontextmanager
async def running(tmp_path: Path, fake: FakeAnthropic, moment: Moment, cache: str | None) -> AsyncIterator[Runtime]:
    llm: dict[str, Any] = {"api-key": "k", "base-url": fake.url, "max-retries": 0}
    if cache is not None:
        llm["cache"] = cache
    config = make_config(tmp_path, llm=llm)
    fake.now = moment.seconds
    async with AnthropicClient(config.mate.llm) as client, \
            open_runtime(config, llm=client, with_memory_worker=False, clock=moment) as rt:
        yield rt


def assert_all_accepted(fake: FakeAnthropic) -> None:
    """No request drew the API's 400 for its cache_control (it would be asked again without it)."""
    for recorded in (r for r in fake.requests if r.path == "/v1/messages"):
        assert cache_problem(recorded.body) is None
        assert recorded.usage is not None


async def test_auto_keeps_an_active_conversation_for_an_hour_and_a_quiet_one_for_five_minutes(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment, None) as rt:  # auto is the default
        for gap, text in ((0, LONG_FACT), (2, "what grows there?"), (10, "and the tomatoes?"),
                          (61, "back again"), (3, "still here")):
            moment.wait(minutes=gap)
            fake.reply_text("noted")
            await chat(rt, text)

    first, second, third, after_silence, resumed = (r.body for r in chat_requests(fake))
    assert lifetimes(first) == {"5m"}  # nothing before it: the next turn may never come
    assert lifetimes(second) == {"1h"} and lifetimes(third) == {"1h"}
    assert lifetimes(after_silence) == {"5m"}  # the previous turn was 61 minutes ago
    assert lifetimes(resumed) == {"1h"}
    usage = [r.usage for r in chat_requests(fake)]
    assert all(u is not None for u in usage)
    second_usage, third_usage = usage[1], usage[2]
    assert second_usage is not None and third_usage is not None
    assert second_usage["cache_creation"]["ephemeral_1h_input_tokens"] > 1024
    # ten minutes later the hour-long entry is still there: read, not written again
    assert third_usage["cache_read_input_tokens"] > second_usage["cache_creation_input_tokens"]
    assert third_usage["cache_creation"]["ephemeral_5m_input_tokens"] == 0
    assert_all_accepted(fake)


async def test_tool_rounds_keep_the_turns_lifetime_in_an_order_the_api_accepts(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment, None) as rt:
        fake.reply_text("noted")
        await chat(rt, LONG_FACT)
        moment.wait(minutes=4)
        fake.reply_tool_use("list_workspace_memory_files", {})
        fake.reply_tool_use("list_workspace_memory_files", {})
        fake.reply_text("done")
        await chat(rt, "what files do you keep?")

    bodies = [r.body for r in chat_requests(fake)]
    assert len(bodies) == 4  # none was asked again without cache_control
    assert [lifetimes(b) for b in bodies[1:]] == [{"1h"}] * 3
    assert len(controls(bodies[-1])) == 4  # base prompt, workspace, previous turn, last round
    assert_all_accepted(fake)


@pytest.mark.parametrize("mode", ["5m", "1h"])
async def test_a_fixed_lifetime_holds_whatever_the_pace(tmp_path: Path, fake: FakeAnthropic, mode: str) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment, mode) as rt:
        for gap in (0, 1, 90):  # a lively turn, then one after an hour and a half
            moment.wait(minutes=gap)
            fake.reply_text("ok")
            await chat(rt, LONG_FACT if not gap else f"more after {gap} minutes")

    assert [lifetimes(r.body) for r in chat_requests(fake)] == [{mode}] * 3
    assert_all_accepted(fake)


async def test_off_sends_no_cache_control_at_all(tmp_path: Path, fake: FakeAnthropic) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment, "off") as rt:
        for gap in (0, 2):
            moment.wait(minutes=gap)
            fake.reply_tool_use("list_workspace_memory_files", {})
            fake.reply_text("ok")
            await chat(rt, LONG_FACT)
        rows = await rt.core.repos.llm_usage.totals_since("1970")

    assert len(fake.messages_requests()) == 4
    assert all("cache_control" not in json.dumps(body) for body in fake.messages_requests())
    (row,) = rows
    assert row.cache_creation_input_tokens == 0 and row.cache_read_input_tokens == 0


async def test_off_covers_the_memory_calls_too(fake: FakeAnthropic) -> None:
    config = LlmConfig(api_key="k", base_url=fake.url, max_retries=0, cache="off")
    fake.reply_text('{"should_update": false}')
    async with AnthropicClient(config) as client:
        await client.complete(LLMRequest(model="claude-fake", system="Extract what is worth keeping. " * 200,
                                         messages=[{"role": "user", "content": "hi"}], max_tokens=50,
                                         purpose="memory", cache_messages=(-1,)))

    (body,) = fake.messages_requests()
    assert "cache_control" not in json.dumps(body)


def test_an_unknown_cache_lifetime_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"mate\.llm\.cache"):
        parse_config({"mate": {"llm": {"cache": "2h"}}}, environ={})


async def test_a_server_that_refuses_the_hour_long_cache_gets_the_five_minute_one(fake: FakeAnthropic) -> None:
    refusal = "cache_control.ttl: Extra inputs are not permitted"
    fake.reply_error(400, "invalid_request_error", refusal)
    fake.reply_text("first")
    fake.reply_text("second")
    request = LLMRequest(model="claude-fake", system="You are a helpful assistant. " * 200,
                         messages=[{"role": "user", "content": "hi"}], max_tokens=50, cache_ttl="1h")
    async with AnthropicClient(LlmConfig(api_key="k", base_url=fake.url, max_retries=0)) as client:
        first = await client.complete(request)
        second = await client.complete(request)

    assert (first.text, second.text) == ("first", "second")
    refused, retried, later = fake.messages_requests()
    assert lifetimes(refused) == {"1h"}
    assert lifetimes(retried) == {"5m"} and lifetimes(later) == {"5m"}  # still cached, for 5 minutes


async def test_a_changed_prefix_in_an_active_conversation_is_kept_for_the_hour(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    moment = Moment()
    moment.now = START.replace(hour=23, minute=55)
    async with running(tmp_path, fake, moment, None) as rt:
        for text in (LONG_FACT, "what grows there?", "and now?", "and the tomatoes?"):
            moment.wait(minutes=2)  # the third turn is past midnight: the date in the prompt changes
            fake.reply_text("noted")
            await chat(rt, text)

    bodies = [r.body for r in chat_requests(fake)]
    assert json.dumps(bodies[1]["system"]).count("2026-03-04") and json.dumps(bodies[2]["system"]).count("2026-03-05")
    # the new day's prompt is written once, for the hour, as the conversation goes on
    assert [lifetimes(b) for b in bodies] == [{"5m"}, {"1h"}, {"1h"}, {"1h"}]
    assert_all_accepted(fake)
