"""Checks that the fake Anthropic server behaves as the real SDK expects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import pytest
from aiohttp import web

from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, ToolUseReply

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
KW: dict[str, Any] = {"model": "claude-test", "max_tokens": 100, "messages": MESSAGES}

ClientFactory = Callable[..., anthropic.AsyncAnthropic]


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx honours proxy variables; a proxy would swallow 127.0.0.1 traffic.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def make_client(fake: FakeAnthropic) -> AsyncIterator[ClientFactory]:
    clients: list[anthropic.AsyncAnthropic] = []

    def make(max_retries: int = 0, timeout: float = 5.0) -> anthropic.AsyncAnthropic:
        client = anthropic.AsyncAnthropic(
            api_key="test-key", base_url=fake.url, max_retries=max_retries, timeout=timeout
        )
        clients.append(client)
        return client

    yield make
    # Closing here keeps filterwarnings=error from tripping on unclosed transports.
    for client in clients:
        await client.close()


async def test_text_reply_and_usage(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.reply_text("hello there", input_tokens=42, output_tokens=7)
    message = await make_client().messages.create(system="be nice", **KW)
    assert message.content[0].type == "text"
    assert message.content[0].text == "hello there"
    assert message.model == "claude-test"
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (42, 7)
    assert message.id.startswith("msg_")
    body = fake.messages_requests()[0]
    assert body["system"] == "be nice" and body["messages"] == MESSAGES
    assert fake.requests[0].path == "/v1/messages"


async def test_default_text_when_queue_empty(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.default_text = "fallback"
    message = await make_client().messages.create(**KW)
    assert message.content[0].type == "text" and message.content[0].text == "fallback"


async def test_tool_use_parsed(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.reply_tool_use("remember", {"fact": "likes tea"}, tool_use_id="toolu_1", text="Saving.")
    message = await make_client().messages.create(**KW)
    assert message.stop_reason == "tool_use"
    text, tool = message.content
    assert text.type == "text" and text.text == "Saving."
    assert tool.type == "tool_use"
    assert (tool.id, tool.name, tool.input) == ("toolu_1", "remember", {"fact": "likes tea"})


async def test_raw_tool_input_passes_through_unvalidated(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.reply_raw_tool_use("remember", '"not an object"')
    fake.reply_raw_tool_use("remember", '{"fact": ')
    client = make_client()
    message = await client.messages.create(**KW)
    tool = message.content[0]
    assert tool.type == "tool_use" and tool.input == "not an object"  # type: ignore[comparison-overlap]
    # Unparsable JSON breaks the whole body; the SDK lets the decode error escape.
    with pytest.raises(json.JSONDecodeError):
        await client.messages.create(**KW)


async def test_prompt_too_long(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.reply_prompt_too_long(210000, 200000)
    with pytest.raises(anthropic.BadRequestError) as info:
        await make_client(max_retries=2).messages.create(**KW)
    assert info.value.status_code == 400
    assert "prompt is too long: 210000 tokens > 200000 maximum" in info.value.message
    assert isinstance(info.value.body, dict) and info.value.body["error"]["type"] == "invalid_request_error"
    assert len(fake.requests) == 1  # 400 is not retried


async def test_rate_limit_retried_then_success(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    # retry-after must be > 0 to be honoured; 0 falls back to ~0.5 s backoff.
    fake.reply_error(429, "rate_limit_error", "slow down", retry_after=0.001)
    fake.reply_text("finally")
    message = await make_client(max_retries=2).messages.create(**KW)
    assert message.content[0].type == "text" and message.content[0].text == "finally"
    assert len(fake.requests) == 2
    assert fake.requests[1].headers["x-stainless-retry-count"] == "1"


async def test_overloaded_retried_then_raised(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    for _ in range(2):
        fake.reply_error(529, "overloaded_error", "Overloaded", retry_after=0.001)
    with pytest.raises(anthropic.InternalServerError) as info:
        await make_client(max_retries=1).messages.create(**KW)
    assert isinstance(info.value, anthropic.OverloadedError) and info.value.status_code == 529
    assert len(fake.requests) == 2


async def test_server_error_without_retries(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.reply_error(500, "api_error", "boom")
    with pytest.raises(anthropic.InternalServerError):
        await make_client(max_retries=0).messages.create(**KW)
    assert len(fake.requests) == 1


async def test_disconnect_is_connection_error(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.reply_disconnect()
    client = make_client()
    with pytest.raises(anthropic.APIConnectionError) as info:
        await client.messages.create(**KW)
    assert not isinstance(info.value, anthropic.APITimeoutError)
    assert len(fake.requests) == 1
    # The server keeps serving after dropping a connection.
    message = await client.messages.create(**KW)
    assert message.content[0].type == "text" and message.content[0].text == "ok"


async def test_latency_causes_timeout(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.latency = 0.5
    with pytest.raises(anthropic.APITimeoutError):
        await make_client(timeout=0.2).messages.create(**KW)
    assert len(fake.requests) == 1  # recorded on arrival, before the wait


async def test_streaming_text(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.reply_text("streamed words here", input_tokens=12, output_tokens=3)
    async with make_client().messages.stream(**KW) as stream:
        chunks = [chunk async for chunk in stream.text_stream]
        message = await stream.get_final_message()
    assert len(chunks) > 1 and "".join(chunks) == "streamed words here"
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, 3)
    assert fake.messages_requests()[0]["stream"] is True


async def test_streaming_event_sequence_and_tool_use(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.reply_tool_use("lookup", {"q": "weather", "n": [1, 2]}, text="Checking.")
    stream = await make_client().messages.create(stream=True, **KW)
    events = [event.type async for event in stream]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    assert events.count("content_block_start") == events.count("content_block_stop") == 2

    fake.reply_tool_use("lookup", {"q": "weather"})
    async with make_client().messages.stream(**KW) as accumulating:
        message = await accumulating.get_final_message()
    tool = message.content[0]
    assert tool.type == "tool_use" and tool.input == {"q": "weather"}
    assert message.stop_reason == "tool_use"


async def test_count_tokens_matches_what_a_request_is_billed(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    client = make_client()
    messages = [{"role": "user", "content": "word " * 400}]
    counted = await client.messages.count_tokens(model="claude-test", messages=messages)
    assert fake.messages_requests() == []  # count_tokens is not a messages request
    billed = await client.messages.create(model="claude-test", max_tokens=50, messages=messages)
    assert counted.input_tokens == billed.usage.input_tokens
    assert 480 <= counted.input_tokens <= 530  # 2000 characters of English: ~500 tokens


async def test_usage_is_computed_from_the_request(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    client = make_client()
    short = await client.messages.create(model="m", max_tokens=500, messages=[{"role": "user", "content": "hi"}])
    long = await client.messages.create(
        model="m", max_tokens=500, system="s" * 4000, messages=[{"role": "user", "content": "hi"}],
        tools=[{"name": "lookup", "description": "d" * 400, "input_schema": {"type": "object"}}],
    )
    assert short.usage.input_tokens < 20
    assert long.usage.input_tokens - short.usage.input_tokens >= 1000 + 100  # system + tool definition
    chinese = await client.messages.create(model="m", max_tokens=500, messages=[{"role": "user", "content": "记" * 300}])
    assert 300 <= chinese.usage.input_tokens < 320  # one token per CJK character
    fake.reply_text("a" * 400)
    answer = await client.messages.create(model="m", max_tokens=500, messages=MESSAGES)
    assert answer.usage.output_tokens == 100


@pytest.mark.parametrize("streaming", [False, True])
async def test_max_tokens_cuts_the_answer(fake: FakeAnthropic, make_client: ClientFactory, streaming: bool) -> None:
    fake.reply_text("word " * 200)  # ~250 tokens
    fake.reply_text("记忆" * 100)  # 200 tokens
    client = make_client()
    for expected in ("word " * 8, "记忆" * 15):
        kw: dict[str, Any] = {"model": "m", "max_tokens": 10 if "word" in expected else 30, "messages": MESSAGES}
        if streaming:
            async with client.messages.stream(**kw) as stream:
                message = await stream.get_final_message()
        else:
            message = await client.messages.create(**kw)
        assert message.stop_reason == "max_tokens"
        assert message.content[0].type == "text" and message.content[0].text == expected
        assert message.usage.output_tokens == kw["max_tokens"]
    fake.reply_text("fits", stop_reason="end_turn")
    fitting = await client.messages.create(model="m", max_tokens=10, messages=MESSAGES)
    assert fitting.stop_reason == "end_turn" and fitting.content[0].type == "text" and fitting.content[0].text == "fits"


async def test_max_tokens_cuts_a_tool_call(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    big = {"content": "x" * 400}
    fake.reply_tool_use("memory_write", big)
    fake.reply_tool_use("memory_write", big)
    client = make_client()
    message = await client.messages.create(model="m", max_tokens=20, messages=MESSAGES)
    assert message.stop_reason == "max_tokens"
    assert message.content[0].type == "tool_use" and message.content[0].input == {}
    stream = await client.messages.create(model="m", max_tokens=20, messages=MESSAGES, stream=True)
    partial = "".join([e.delta.partial_json async for e in stream
                       if e.type == "content_block_delta" and e.delta.type == "input_json_delta"])
    assert partial == json.dumps(big)[:80]  # cut where the budget ran out, not valid JSON


async def test_responder_takes_precedence(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    def responder(request: RecordedRequest) -> Script | None:
        # Answer by content so concurrent requests get stable replies.
        content = request.body["messages"][-1]["content"]
        return TextReply(f"echo {content}", delay=0.05 if content == "slow" else 0.0) if content != "queue" else None

    fake.responder = responder
    fake.reply_text("from queue")
    client = make_client()

    async def ask(content: str) -> str:
        message = await client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": content}]
        )
        block = message.content[0]
        assert block.type == "text"
        return block.text

    assert await asyncio.gather(ask("slow"), ask("fast"), ask("queue")) == ["echo slow", "echo fast", "from queue"]


async def test_reply_with_custom_handlers(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    async def teapot(request: RecordedRequest) -> web.StreamResponse:
        return web.json_response({"type": "error", "error": {"type": "teapot", "message": "short"}}, status=418)

    def shaped(request: RecordedRequest) -> dict[str, Any]:
        return {
            "id": "msg_x",
            "type": "message",
            "role": "assistant",
            "model": request.body["model"],
            "content": [{"type": "text", "text": "custom"}],
            "stop_reason": "max_tokens",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }

    fake.reply_with(teapot)
    fake.reply_with(shaped)
    client = make_client()
    with pytest.raises(anthropic.APIStatusError) as info:
        await client.messages.create(**KW)
    assert info.value.status_code == 418
    message = await client.messages.create(**KW)
    assert message.stop_reason == "max_tokens"
    assert message.content[0].type == "text" and message.content[0].text == "custom"


def _cached_system(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]


async def test_prompt_cache_writes_then_reads_a_long_prefix(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    client = make_client()
    system = _cached_system("rules " * 1000)  # ~1500 tokens: above the 1024 minimum
    first = await client.messages.create(model="m", max_tokens=50, system=system, messages=MESSAGES)
    second = await client.messages.create(model="m", max_tokens=50, system=system,
                                          messages=[{"role": "user", "content": "something else"}])
    assert first.usage.cache_creation_input_tokens and first.usage.cache_creation_input_tokens >= 1024
    assert first.usage.cache_read_input_tokens == 0 and first.usage.input_tokens < 20
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    other_model = await client.messages.create(model="other", max_tokens=50, system=system, messages=MESSAGES)
    assert other_model.usage.cache_read_input_tokens == 0  # caches are per model


async def test_prompt_cache_ignores_short_prefixes_and_expires(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    client = make_client()
    short = await client.messages.create(model="m", max_tokens=50, system=_cached_system("short"), messages=MESSAGES)
    assert (short.usage.cache_creation_input_tokens, short.usage.cache_read_input_tokens) == (0, 0)
    clock = [1000.0]
    fake.now = lambda: clock[0]
    system = _cached_system("policy " * 1000)
    await client.messages.create(model="m", max_tokens=50, system=system, messages=MESSAGES)
    clock[0] += 299  # a read inside the lifetime refreshes it
    hit = await client.messages.create(model="m", max_tokens=50, system=system, messages=MESSAGES)
    assert hit.usage.cache_read_input_tokens
    clock[0] += 299
    assert (await client.messages.create(model="m", max_tokens=50, system=system,
                                         messages=MESSAGES)).usage.cache_read_input_tokens
    clock[0] += 301
    expired = await client.messages.create(model="m", max_tokens=50, system=system, messages=MESSAGES)
    assert expired.usage.cache_read_input_tokens == 0 and expired.usage.cache_creation_input_tokens


async def test_prompt_cache_hits_the_previous_turn_without_its_breakpoint(
    fake: FakeAnthropic, make_client: ClientFactory,
) -> None:
    client = make_client()
    history: list[dict[str, Any]] = [{"role": "user", "content": "tell me " * 700}]

    def marked_last(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        *rest, last = messages
        return [*rest, {"role": last["role"], "content": [
            {"type": "text", "text": last["content"], "cache_control": {"type": "ephemeral"}}]}]

    first = await client.messages.create(model="m", max_tokens=50, messages=marked_last(history))
    history += [{"role": "assistant", "content": "sure"}, {"role": "user", "content": "and more"}]
    second = await client.messages.create(model="m", max_tokens=50, messages=marked_last(history))
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens and second.usage.cache_creation_input_tokens < 20
    total = second.usage.input_tokens + second.usage.cache_creation_input_tokens + second.usage.cache_read_input_tokens
    counted = await client.messages.count_tokens(model="m", messages=marked_last(history))
    assert total == counted.input_tokens  # caching changes the bill, not the count


async def test_streaming_is_paced_by_time_to_first_token_and_rate(make_client: ClientFactory) -> None:
    async with FakeAnthropic(ttft=0.3, tokens_per_s=200) as paced:
        client = anthropic.AsyncAnthropic(api_key="k", base_url=paced.url, max_retries=0)
        try:
            paced.reply_text("word " * 80)  # 100 tokens: 0.5 s at 200 tokens/s
            loop = asyncio.get_running_loop()
            start = loop.time()
            arrivals = []
            async with client.messages.stream(model="m", max_tokens=500, messages=MESSAGES) as stream:
                async for _ in stream.text_stream:
                    arrivals.append(loop.time() - start)
            assert 0.3 <= arrivals[0] < 0.8  # lower bounds are the point; upper ones leave room for a busy host
            assert 0.75 <= arrivals[-1] < 3.0 and len(arrivals) >= 20
            paced.reply_text("word " * 80)
            start = loop.time()
            await client.messages.create(model="m", max_tokens=500, messages=MESSAGES)
            assert 0.75 <= loop.time() - start < 3.0  # the whole answer, then at once
        finally:
            await client.close()


LOOKUP_TOOL: dict[str, Any] = {
    "name": "lookup", "description": "Look a word up in the dictionary.",
    "input_schema": {"type": "object", "properties": {"word": {"type": "string", "description": "The word."}},
                     "required": ["word"]},
}


@pytest.mark.parametrize(("model", "choice", "system_prompt_tokens"), [
    ("claude-sonnet-4-5", None, 346),  # Claude 4 models: 346 with tool_choice auto / none ...
    ("claude-sonnet-4-5", {"type": "any"}, 313),  # ... and 313 when a tool is forced
    ("claude-3-haiku-20240307", None, 264),
    ("claude-3-opus-20240229", {"type": "tool", "name": "lookup"}, 281),
])
async def test_tools_are_counted_as_json_with_the_tool_use_system_prompt(
    fake: FakeAnthropic, make_client: ClientFactory, model: str, choice: dict[str, Any] | None,
    system_prompt_tokens: int,
) -> None:
    from tests.support.fakes.anthropic_billing import estimate_tokens

    client = make_client()
    extra: dict[str, Any] = {"tool_choice": choice} if choice else {}
    bare = await client.messages.count_tokens(model=model, messages=MESSAGES)
    counted = await client.messages.count_tokens(model=model, messages=MESSAGES, tools=[LOOKUP_TOOL], **extra)
    # The definition as the JSON it is sent as (names, keys and all), plus the API's own prompt.
    assert counted.input_tokens - bare.input_tokens == estimate_tokens(json.dumps(LOOKUP_TOOL)) + system_prompt_tokens
    billed = await client.messages.create(model=model, max_tokens=20, messages=MESSAGES, tools=[LOOKUP_TOOL], **extra)
    assert billed.usage.input_tokens == counted.input_tokens


def _one_hour(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]


async def test_a_one_hour_cache_entry_lives_sixty_minutes_and_its_write_is_reported_apart(
    fake: FakeAnthropic, make_client: ClientFactory,
) -> None:
    clock = [1000.0]
    fake.now = lambda: clock[0]
    client = make_client()
    system = _one_hour("policy " * 1000)

    async def ask() -> Any:
        return (await client.messages.create(model="m", max_tokens=50, system=system, messages=MESSAGES)).usage

    first = await ask()
    assert first.cache_creation_input_tokens >= 1024 and first.cache_read_input_tokens == 0
    assert first.cache_creation is not None
    assert first.cache_creation.ephemeral_1h_input_tokens == first.cache_creation_input_tokens
    assert first.cache_creation.ephemeral_5m_input_tokens == 0
    clock[0] += 59 * 60  # long past five minutes
    assert (await ask()).cache_read_input_tokens == first.cache_creation_input_tokens
    clock[0] += 59 * 60  # the read renewed it for another hour
    assert (await ask()).cache_read_input_tokens == first.cache_creation_input_tokens
    clock[0] += 61 * 60
    expired = await ask()
    assert expired.cache_read_input_tokens == 0 and expired.cache_creation_input_tokens == first.cache_creation_input_tokens


async def test_a_request_mixing_lifetimes_bills_each_part_by_its_breakpoint(
    fake: FakeAnthropic, make_client: ClientFactory,
) -> None:
    clock = [1000.0]
    fake.now = lambda: clock[0]
    client = make_client()
    system = _one_hour("policy " * 1000)
    history = [{"role": "user", "content": [{"type": "text", "text": "tell me " * 800,
                                             "cache_control": {"type": "ephemeral"}}]}]
    first = (await client.messages.create(model="m", max_tokens=50, system=system, messages=history)).usage
    assert first.cache_creation is not None
    assert first.cache_creation.ephemeral_1h_input_tokens >= 1024  # the system prompt, up to its 1-hour breakpoint
    assert first.cache_creation.ephemeral_5m_input_tokens >= 1000  # the history after it
    clock[0] += 10 * 60  # the 5-minute part expired, the 1-hour part did not
    later = (await client.messages.create(model="m", max_tokens=50, system=system, messages=history)).usage
    assert later.cache_read_input_tokens == first.cache_creation.ephemeral_1h_input_tokens
    assert later.cache_creation is not None
    assert later.cache_creation.ephemeral_5m_input_tokens == first.cache_creation.ephemeral_5m_input_tokens


@pytest.mark.parametrize("ttls", [("5m", "1h"), ("2h",)])
async def test_cache_control_the_api_refuses_gets_a_400(
    fake: FakeAnthropic, make_client: ClientFactory, ttls: tuple[str, ...],
) -> None:
    blocks = [{"type": "text", "text": f"part {i} " * 400, "cache_control": {"type": "ephemeral", "ttl": ttl}}
              for i, ttl in enumerate(ttls)]
    with pytest.raises(anthropic.BadRequestError) as info:
        await make_client().messages.create(model="m", max_tokens=50, system=blocks, messages=MESSAGES)
    assert "cache_control" in str(info.value) and "ttl" in str(info.value)


async def test_changing_tool_choice_keeps_the_cached_tools_and_system_but_not_the_messages(
    fake: FakeAnthropic, make_client: ClientFactory,
) -> None:
    client = make_client()
    system = _one_hour("policy " * 1000)
    history = [{"role": "user", "content": [{"type": "text", "text": "tell me " * 800,
                                             "cache_control": {"type": "ephemeral"}}]}]
    kw: dict[str, Any] = {"model": "m", "max_tokens": 50, "system": system, "messages": history,
                          "tools": [LOOKUP_TOOL]}
    first = (await client.messages.create(**kw)).usage
    forced = (await client.messages.create(**kw, tool_choice={"type": "any"})).usage
    assert first.cache_creation is not None
    # tools and system are read (the API's tool-use prompt is 313 tokens instead of 346 when forced) ...
    assert forced.cache_read_input_tokens == first.cache_creation.ephemeral_1h_input_tokens - (346 - 313)
    assert forced.cache_creation_input_tokens >= 1000  # ... the history is written again


async def test_a_tool_use_answer_can_call_several_tools(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.reply_tool_use("lookup", {"word": "a"})
    fake.push(ToolUseReply("lookup", {"word": "a"}, more=(("lookup", {"word": "b"}), ("lookup", {"word": "c"}))))
    fake.push(ToolUseReply("lookup", {"word": "a"}, more=(("lookup", {"word": "b"}),)))
    client = make_client()
    single = await client.messages.create(**KW)
    message = await client.messages.create(**KW)
    assert [b.input for b in message.content if b.type == "tool_use"] == [{"word": "a"}, {"word": "b"}, {"word": "c"}]
    assert len({b.id for b in message.content if b.type == "tool_use"}) == 3
    assert message.usage.output_tokens > single.usage.output_tokens
    async with client.messages.stream(**KW) as stream:
        streamed = await stream.get_final_message()
    assert [b.input for b in streamed.content if b.type == "tool_use"] == [{"word": "a"}, {"word": "b"}]


async def test_each_request_records_what_it_was_billed_and_when(fake: FakeAnthropic, make_client: ClientFactory) -> None:
    fake.now = lambda: 5000.0
    answer = await make_client().messages.create(system=_one_hour("policy " * 1000), **KW)
    (recorded,) = fake.requests
    assert recorded.at == 5000.0
    assert recorded.usage is not None
    assert recorded.usage["cache_creation_input_tokens"] == answer.usage.cache_creation_input_tokens
    assert recorded.usage["cache_creation"]["ephemeral_1h_input_tokens"] == answer.usage.cache_creation_input_tokens
    assert recorded.usage["output_tokens"] == answer.usage.output_tokens


async def test_reading_a_long_prefix_keeps_the_shorter_cached_prefixes_inside_it_alive(
    fake: FakeAnthropic, make_client: ClientFactory,
) -> None:
    clock = [1000.0]
    fake.now = lambda: clock[0]
    client = make_client()
    marked = {"type": "ephemeral"}
    history = [{"role": "user", "content": [{"type": "text", "text": "tell me " * 800, "cache_control": marked}]}]

    async def ask(workspace: str) -> Any:
        system = [{"type": "text", "text": "base rules " * 600, "cache_control": marked},
                  {"type": "text", "text": workspace, "cache_control": marked}]
        return (await client.messages.create(model="m", max_tokens=20, system=system, messages=history)).usage

    first = await ask("MEMORY.md: likes tea")
    clock[0] += 4 * 60
    assert (await ask("MEMORY.md: likes tea")).cache_read_input_tokens == first.cache_creation_input_tokens
    clock[0] += 4 * 60  # 8 minutes after the base prompt was written, 4 after it was last used
    changed = await ask("MEMORY.md: likes tea, moved to Lisbon")
    assert changed.cache_read_input_tokens >= 1024  # the base prompt, renewed by the read 4 minutes ago
    assert changed.cache_creation_input_tokens >= 1000  # the changed workspace and the history after it
