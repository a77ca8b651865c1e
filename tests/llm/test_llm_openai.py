"""OpenAIClient through the real openai SDK against the fake Chat Completions server: the wire shape, usage, streaming, errors."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import web

from bot.core.config import LlmConfig, parse_config
from bot.core.errors import LLMError, PromptTooLong, StreamBroken
from bot.llm import LLMRequest, OpenAIClient, TextToolCallClient, UsageRecordingClient
from bot.llm.openai import api_root
from bot.llm.openai_messages import chat_params
from bot.app.core import open_core
from tests.support.config import make_config
from tests.support.fakes.anthropic import RecordedRequest, TextReply, ToolUseReply
from tests.support.fakes.openai_chat import FakeOpenAIChat

TOOL = {"name": "memory_write", "description": "Write a memory file.",
        "input_schema": {"type": "object", "properties": {"filename": {"type": "string"}}}}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAIChat]:
    async with FakeOpenAIChat() as server:
        yield server


def llm_config(fake: FakeOpenAIChat, **options: Any) -> LlmConfig:
    llm = {"api": "openai", "api-key": "sk-test-secret", "base-url": fake.base_url, "max-retries": 0, **options}
    return parse_config({"mate": {"llm": llm}}, environ={}).mate.llm


def ask(text: str = "hi", **options: Any) -> LLMRequest:
    return LLMRequest(model="gpt-test", system="You are Mate.", messages=[{"role": "user", "content": text}],
                      max_tokens=options.pop("max_tokens", 200), **options)


async def test_request_is_a_chat_body_with_a_system_message_and_no_cache_marks(fake: FakeOpenAIChat) -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "[2026-12-04 10:00]"},
                                     {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": PNG}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Noting it."},
                                          {"type": "tool_use", "id": "call_1", "name": "memory_write",
                                           "input": {"filename": "MEMORY.md"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "saved"},
                                     {"type": "text", "text": "thanks"}]},
    ]
    request = LLMRequest(model="gpt-test", system="You are Mate.", messages=history, max_tokens=64, tools=[TOOL],
                         cache_messages=(0, 2))
    async with OpenAIClient(llm_config(fake)) as client:
        response = await client.complete(request)

    (body,) = fake.chat_requests()
    assert response.text == "ok"
    assert "cache_control" not in json.dumps(body)
    assert body["messages"] == [
        {"role": "system", "content": "You are Mate."},
        {"role": "user", "content": [{"type": "text", "text": "[2026-12-04 10:00]"}, {"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]},
        {"role": "assistant", "content": "Noting it.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "memory_write", "arguments": '{"filename": "MEMORY.md"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "saved"},
        {"role": "user", "content": "thanks"},
    ]
    assert body["tools"] == [{"type": "function", "function": {
        "name": "memory_write", "parameters": TOOL["input_schema"], "description": "Write a memory file."}}]
    assert body["max_tokens"] == 64 and body["model"] == "gpt-test"
    assert fake.requests[0].headers["authorization"] == "Bearer sk-test-secret"


class PostOnlySDK(openai.AsyncOpenAI):
    """The SDK with `chat.completions.create` out of reach: it walks every message of every
    request against its TypedDicts, CPU that grows with the history (SPEC S34)."""

    @property
    def chat(self) -> Any:
        raise AssertionError("chat.completions.create runs the SDK's per-message transform")


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
async def test_the_body_on_the_wire_is_the_one_chat_params_built(fake: FakeOpenAIChat, streamed: bool) -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": PNG}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "memory_write",
                                           "input": {"filename": "MEMORY.md", "note": "café ☕"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "saved",
                                      "is_error": True},
                                     {"type": "text", "text": "and now? 你好"}]},
    ]
    request = LLMRequest(model="gpt-test", system="You are Mate.", messages=history, max_tokens=64, tools=[TOOL],
                         tool_choice="none")
    sdk = PostOnlySDK(api_key="sk-test-secret", base_url=fake.base_url, max_retries=0)
    heard: list[str] = []
    async with OpenAIClient(llm_config(fake), sdk=sdk) as client:
        response = await client.complete(request, heard.append if streamed else None)

    (body,) = fake.chat_requests()
    expected = chat_params(request)
    if streamed:
        expected |= {"stream": True, "stream_options": {"include_usage": True}}
        assert "".join(heard) == "ok"
    assert body == expected
    assert response.text == "ok" and response.input_tokens > 0
    assert fake.requests[0].headers["authorization"] == "Bearer sk-test-secret"
    assert fake.requests[0].headers["content-type"] == "application/json"


async def test_streamed_answer_reaches_the_listener_piece_by_piece(fake: FakeOpenAIChat) -> None:
    heard: list[str] = []
    fake.reply_text("The quick brown fox jumps over the lazy dog.")
    async with OpenAIClient(llm_config(fake)) as client:
        response = await client.complete(ask(), heard.append)

    assert len(heard) == 3 and "".join(heard) == response.text == "The quick brown fox jumps over the lazy dog."
    assert response.stop_reason == "end_turn"
    (body,) = fake.chat_requests()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert response.input_tokens == fake.requests[0].usage["prompt_tokens"] > 0  # type: ignore[index]
    assert response.output_tokens == fake.requests[0].usage["completion_tokens"] > 0  # type: ignore[index]


@pytest.mark.parametrize("streamed", [False, True])
async def test_tool_call_comes_back_as_a_tool_use_block(fake: FakeOpenAIChat, streamed: bool) -> None:
    fake.push(ToolUseReply("memory_write", {"filename": "PROFILE.md", "content": "- likes tea " * 5},
                           tool_use_id="call_abc", more=(("memory_write", {"filename": "MEMORY.md"}),)))
    async with OpenAIClient(llm_config(fake)) as client:
        response = await client.complete(ask(tools=[TOOL]), (lambda _: None) if streamed else None)

    assert response.stop_reason == "tool_use"
    assert [(c.id, c.name, c.input) for c in response.tool_calls][0] == (
        "call_abc", "memory_write", {"filename": "PROFILE.md", "content": "- likes tea " * 5})
    assert [c.input for c in response.tool_calls][1] == {"filename": "MEMORY.md"}
    assert response.content[0] == {"type": "tool_use", "id": "call_abc", "name": "memory_write",
                                   "input": {"filename": "PROFILE.md", "content": "- likes tea " * 5}}


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_answer_cut_at_max_tokens_says_max_tokens(fake: FakeOpenAIChat, streamed: bool) -> None:
    fake.reply_text("word " * 200)
    async with OpenAIClient(llm_config(fake)) as client:
        response = await client.complete(ask(max_tokens=10), (lambda _: None) if streamed else None)

    assert response.stop_reason == "max_tokens"
    assert response.output_tokens == 10 and len(response.text) <= 40


async def test_a_repeated_prefix_is_stored_as_cache_reads(tmp_path: Path, fake: FakeOpenAIChat) -> None:
    system = "You are Mate. " + "Background the model reads every time. " * 200  # ~2 000 tokens
    config = make_config(tmp_path, llm={"api": "openai", "api-key": "k", "base-url": fake.base_url})
    async with open_core(config) as core, OpenAIClient(config.mate.llm) as inner:
        client = UsageRecordingClient(inner, core.repos.llm_usage)
        first = await client.complete(LLMRequest(model="m", system=system, max_tokens=50,
                                                 messages=[{"role": "user", "content": "one"}]))
        second = await client.complete(LLMRequest(model="m", system=system, max_tokens=50,
                                                  messages=[{"role": "user", "content": "two"}]))
        deadline = asyncio.get_running_loop().time() + 30  # the rows are queued into the next group commit
        while True:
            rows = await core.repos.llm_usage.totals_since("1970")
            if (rows and rows[0].calls == 2) or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.01)
        (row,) = rows

    assert first.cache_read_input_tokens == 0
    cached = fake.requests[1].usage["prompt_tokens_details"]["cached_tokens"]  # type: ignore[index]
    assert cached >= 1024 and second.cache_read_input_tokens == cached
    assert second.input_tokens == fake.requests[1].usage["prompt_tokens"] - cached  # type: ignore[index]
    assert second.prompt_tokens == fake.requests[1].usage["prompt_tokens"]  # type: ignore[index]
    assert row.cache_read_input_tokens == cached
    assert row.input_tokens == first.input_tokens + second.input_tokens
    assert row.cache_creation_input_tokens == 0


async def test_rate_limit_is_retried_after_the_wait_the_server_asks(fake: FakeOpenAIChat) -> None:
    fake.reply_error(429, "rate_limit_exceeded", "Rate limit reached", retry_after=0.01)
    fake.reply_error(503, "server_error", "The server is overloaded")
    fake.reply_text("made it")
    async with OpenAIClient(llm_config(fake, **{"max-retries": 2})) as client:
        response = await client.complete(ask())

    assert response.text == "made it"
    assert len(fake.chat_requests()) == 3
    assert fake.chat_requests()[0] == fake.chat_requests()[2]


async def test_a_retry_after_longer_than_the_timeout_is_not_waited_out(fake: FakeOpenAIChat) -> None:
    fake.reply_error(429, "rate_limit_exceeded", "Rate limit reached", retry_after=3600)
    async with OpenAIClient(llm_config(fake, **{"max-retries": 2, "timeout-seconds": 5})) as client:
        with pytest.raises(LLMError, match="retry after 3600 s"):
            await client.complete(ask())
    assert len(fake.chat_requests()) == 1


async def test_an_html_error_page_is_an_error_that_says_so(fake: FakeOpenAIChat) -> None:
    fake.reply_html_error(502)
    async with OpenAIClient(llm_config(fake)) as client:
        with pytest.raises(LLMError, match="HTTP 502: the answer was an HTML page") as failed:
            await client.complete(ask())
    assert not isinstance(failed.value, PromptTooLong)


@pytest.mark.parametrize("message", [
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
    "the request exceeds the available context size, try increasing it",  # llama.cpp's words
])
async def test_context_length_errors_are_prompt_too_long(fake: FakeOpenAIChat, message: str) -> None:
    fake.reply_error(400, "invalid_request_error", message)
    fake.reply_prompt_too_long()
    async with OpenAIClient(llm_config(fake)) as client:
        for _ in range(2):
            with pytest.raises(PromptTooLong):
                await client.complete(ask())


async def test_a_server_with_a_small_context_refuses_a_long_prompt(fake: FakeOpenAIChat) -> None:
    fake.context_window = 50
    async with OpenAIClient(llm_config(fake)) as client:
        assert (await client.complete(ask("short"))).text == "ok"
        with pytest.raises(PromptTooLong, match="maximum context length is 50 tokens"):
            await client.complete(ask("long " * 100))


async def test_the_key_is_not_in_error_texts(fake: FakeOpenAIChat) -> None:
    fake.reply_error(401, "invalid_api_key", "Incorrect API key provided: sk-test-secret")
    async with OpenAIClient(llm_config(fake)) as client:
        with pytest.raises(LLMError) as failed:
            await client.complete(ask())
    assert "sk-test-secret" not in str(failed.value) and "HTTP 401" in str(failed.value)


async def test_a_server_that_wants_max_completion_tokens_gets_it_from_then_on(fake: FakeOpenAIChat) -> None:
    fake.reply_error(400, "invalid_request_error", "Unsupported parameter: 'max_tokens' is not supported with "
                     "this model. Use 'max_completion_tokens' instead.")
    async with OpenAIClient(llm_config(fake)) as client:
        assert (await client.complete(ask())).text == "ok"
        assert (await client.complete(ask())).text == "ok"

    first, second, third = fake.chat_requests()
    assert "max_tokens" in first and "max_completion_tokens" not in first
    assert second["max_completion_tokens"] == third["max_completion_tokens"] == 200
    assert "max_tokens" not in third


async def test_a_stream_cut_half_way_keeps_what_was_shown(fake: FakeOpenAIChat) -> None:
    fake.push(TextReply("A long answer that breaks off in the middle of things.", break_after_chars=10))
    heard: list[str] = []
    async with OpenAIClient(llm_config(fake, **{"max-retries": 2})) as client:
        with pytest.raises(StreamBroken) as broken:
            await client.complete(ask(), heard.append)
    assert broken.value.partial == "".join(heard) and heard
    assert len(fake.chat_requests()) == 1  # a second answer would not follow on from what was shown


async def test_a_tool_call_written_as_text_still_runs_as_a_tool_call(fake: FakeOpenAIChat) -> None:
    fake.reply_text('```json\n{"name": "memory_write", "arguments": {"filename": "MEMORY.md"}}\n```')
    async with OpenAIClient(llm_config(fake)) as inner:
        response = await TextToolCallClient(inner).complete(ask(tools=[TOOL]), lambda _: None)
    (call,) = response.tool_calls
    assert (call.name, call.input) == ("memory_write", {"filename": "MEMORY.md"})


def test_base_url_without_a_path_gets_v1() -> None:
    assert api_root("http://127.0.0.1:8080") == "http://127.0.0.1:8080/v1"
    assert api_root("http://127.0.0.1:11434/v1/") == "http://127.0.0.1:11434/v1"
    assert api_root("https://openrouter.ai/api/v1") == "https://openrouter.ai/api/v1"


@pytest.mark.parametrize(("environ", "api", "protocol", "key"), [
    ({"OPENAI_API_KEY": "sk-o"}, "openai", "openai", "sk-o"),
    ({"OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "sk-ant-a"}, "anthropic", "anthropic", "sk-ant-a"),
    ({"ANTHROPIC_API_KEY": "sk-ant-a"}, "anthropic", "anthropic", "sk-ant-a"),
    ({}, "auto", "anthropic", ""),  # nothing to pick by: spoken as anthropic, either key would do
])
def test_api_auto_picks_openai_when_only_its_key_is_set(
    environ: dict[str, str], api: str, protocol: str, key: str,
) -> None:
    data = {"mate": {"llm": {"api": "auto", "api-key": "${ANTHROPIC_API_KEY:-}"}}}
    llm = parse_config(data, environ=environ).mate.llm
    assert (llm.api, llm.protocol, llm.api_key) == (api, protocol, key)


def test_api_defaults_to_anthropic_and_rejects_other_values() -> None:
    assert parse_config({}, environ={"OPENAI_API_KEY": "sk-o"}).mate.llm.protocol == "anthropic"
    from bot.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^mate\.llm\.api: "):
        parse_config({"mate": {"llm": {"api": "gemini"}}}, environ={})
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        parse_config({"mate": {"llm": {"api": "openai", "provider": "anthropic"}}}, environ={})



def _stream_with_error(text: str) -> Any:
    """A 200 event stream that sends `text` (maybe none), then an error object, as llama.cpp and proxies do mid-answer."""
    async def answer(recorded: RecordedRequest) -> web.Response:
        events = []
        if text:
            chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                     "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
            events.append(f"data: {json.dumps(chunk)}\n\n")
        error = {"error": {"message": "the server is overloaded", "type": "server_error", "code": 503}}
        events.append(f"data: {json.dumps(error)}\n\n")
        return web.Response(text="".join(events), content_type="text/event-stream")

    return answer


async def test_an_error_inside_the_stream_before_any_text_is_retried(fake: FakeOpenAIChat) -> None:
    fake.reply_with(_stream_with_error(""))
    fake.reply_text("second try")
    async with OpenAIClient(llm_config(fake, **{"max-retries": 1})) as client:
        response = await client.complete(ask(), lambda _: None)
    assert response.text == "second try" and len(fake.chat_requests()) == 2


async def test_an_error_inside_the_stream_after_text_keeps_what_was_shown(fake: FakeOpenAIChat) -> None:
    fake.reply_with(_stream_with_error("Half an ans"))
    heard: list[str] = []
    async with OpenAIClient(llm_config(fake, **{"max-retries": 1})) as client:
        with pytest.raises(StreamBroken, match="overloaded") as broken:
            await client.complete(ask(), heard.append)
    assert broken.value.partial == "Half an ans" == "".join(heard)
    assert len(fake.chat_requests()) == 1


async def test_a_stream_that_goes_silent_is_given_up_at_the_timeout(fake: FakeOpenAIChat) -> None:
    release = asyncio.Event()

    async def hold() -> None:
        await release.wait()

    fake.push(TextReply("never", hold=hold))
    async with OpenAIClient(llm_config(fake, **{"timeout-seconds": 0.5})) as client:
        started = asyncio.get_running_loop().time()
        with pytest.raises(LLMError):
            await client.complete(ask(), lambda _: None)
        elapsed = asyncio.get_running_loop().time() - started
        release.set()
    assert elapsed < 3


def test_check_config_names_the_protocol_auto_resolved_to(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.__main__ import main

    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-onlyopenai123")
    config = tmp_path / "config.yaml"
    config.write_text(f"mate:\n  database:\n    path: {tmp_path / 'mate.db'}\n  llm:\n    api: auto\n"
                      "    api-key: ${ANTHROPIC_API_KEY:-}\n    model: gpt-4.1-mini\n")
    assert main(["check-config", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "api: openai" in out and "sk-proj-onlyopenai123" not in out
    assert "# provider auto resolves to: openai-compatible chat completions, model gpt-4.1-mini" in out


async def test_status_names_the_openai_api(tmp_path: Path) -> None:
    from bot.app.runtime import open_runtime
    from channels.base import InboundMessage

    config = make_config(tmp_path, llm={"api": "openai", "api-key": "sk-x"})
    async with open_runtime(config, with_memory_worker=False) as rt:
        reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", "/status", is_admin=True))
    assert reply is not None and "the OpenAI API" in reply.text.splitlines()[0]


async def test_deepseek_cache_hits_count_as_cache_reads(fake: FakeOpenAIChat) -> None:
    fake.reply_with(lambda recorded: {
        "id": "x", "object": "chat.completion", "created": 0, "model": "deepseek-chat",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1500, "completion_tokens": 3, "total_tokens": 1503,
                  "prompt_cache_hit_tokens": 1280, "prompt_cache_miss_tokens": 220}})
    async with OpenAIClient(llm_config(fake)) as client:
        response = await client.complete(ask())
    assert (response.input_tokens, response.cache_read_input_tokens, response.output_tokens) == (220, 1280, 3)


async def test_a_server_that_refuses_stream_options_streams_without_them(fake: FakeOpenAIChat) -> None:
    fake.reply_error(400, "invalid_request_error", "Unrecognized request argument supplied: stream_options")
    fake.reply_text("streamed anyway")
    heard: list[str] = []
    async with OpenAIClient(llm_config(fake)) as client:
        response = await client.complete(ask(), heard.append)
        await client.complete(ask(), heard.append)
    assert response.text == "streamed anyway" == "".join(heard[:3])
    first, second, third = fake.chat_requests()
    assert "stream_options" in first and "stream_options" not in second and "stream_options" not in third
    assert second["stream"] is True
