"""The same conversations on both protocols: the daemon's pipeline built from config (`mate.llm.api`), the real SDKs, the fakes.

Nothing above bot/llm knows which protocol is in use; these scenarios run unchanged on the
Anthropic Messages API and on OpenAI-compatible Chat Completions and must come out the same.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.llm import AnthropicClient, OpenAIClient
from bot.llm.usage import UsageRecordingClient
from bot.app.runtime import Runtime, open_runtime
from channels.base import InboundMessage
from memory.workspace.tool import READ_TOOL
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, ToolUseReply, system_text
from tests.support.fakes.openai_chat import FakeOpenAIChat, system_of

CID = "console:me"
MEMORY_REPLY = json.dumps({
    "should_update": True, "reason": "the user shared stable facts",
    "daily_entry": "- Alice said she is vegan and lives in Lyon",
    "memory_update": "", "profile_update": "# Profile\n\n- Name: Alice\n- Diet: vegan\n- City: Lyon",
})


@dataclass
class Lane:
    """One protocol: its fake server and how to read the requests it got."""

    api: str
    fake: FakeAnthropic | FakeOpenAIChat
    base_url: str

    def chat_bodies(self) -> list[dict[str, Any]]:
        return self.fake.messages_requests()

    def system(self, body: dict[str, Any]) -> str:
        return system_text(body) if self.api == "anthropic" else system_of(body)

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """(call id, content) of the tool results the request carries."""
        if self.api == "anthropic":
            return [(b["tool_use_id"], b["content"]) for m in body["messages"] if isinstance(m["content"], list)
                    for b in m["content"] if b.get("type") == "tool_result"]
        return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]


@pytest.fixture(params=["anthropic", "openai"])
async def lane(request: pytest.FixtureRequest) -> AsyncIterator[Lane]:
    if request.param == "anthropic":
        async with FakeAnthropic() as anthropic_fake:
            yield Lane("anthropic", anthropic_fake, anthropic_fake.url)
    else:
        async with FakeOpenAIChat() as openai_fake:
            yield Lane("openai", openai_fake, openai_fake.base_url)


@asynccontextmanager
async def running(tmp_path: Path, lane: Lane, *, memory_worker: bool = False, **llm: Any) -> AsyncIterator[Runtime]:
    options = {"api": lane.api, "api-key": "sk-scenario", "base-url": lane.base_url, "max-retries": 0,
               "text-tool-calls": "off", **llm}
    config = make_config(tmp_path, llm=options, memory={"cooldown-minutes": 0})
    async with open_runtime(config, with_memory_worker=memory_worker) as rt:  # the client is built from config
        yield rt


async def say(rt: Runtime, text: str, heard: list[str] | None = None) -> str:
    class Shown:
        def text(self, delta: str) -> None:
            if heard is not None:
                heard.append(delta)

        def status(self, line: str) -> None:
            pass

    reply = await rt.router.handle(InboundMessage("console", "me", "me", "Me", text, trigger_source="console"),
                                   stream=Shown())
    assert reply is not None
    assert await rt.router.drain(5)
    return reply.text


async def stored(rt: Runtime) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in await rt.core.repos.messages.after(CID, 0)]


def client_of(rt: Runtime) -> object:
    llm = rt.llm
    return llm.inner if isinstance(llm, UsageRecordingClient) else llm


async def test_a_streamed_reply_is_shown_stored_and_billed(tmp_path: Path, lane: Lane) -> None:
    heard: list[str] = []
    async with running(tmp_path, lane) as rt:
        lane.fake.reply_text("Hello! Nice to meet you, streamed in pieces.")
        reply = await say(rt, "hello there", heard)
        rows = await stored(rt)
        usage = await rt.core.repos.llm_usage.totals_since("1970")
        client = client_of(rt)

    assert isinstance(client, OpenAIClient if lane.api == "openai" else AnthropicClient)
    assert reply == "Hello! Nice to meet you, streamed in pieces."
    assert len(heard) >= 2 and "".join(heard) == reply
    assert rows == [("user", "hello there"), ("assistant", reply)]
    (body,) = lane.chat_bodies()
    assert body["stream"] is True and "Mate" in lane.system(body)
    assert [(u.purpose, u.calls) for u in usage] == [("chat", 1)] and usage[0].output_tokens > 0


async def test_a_tool_call_round_trip(tmp_path: Path, lane: Lane) -> None:
    async with running(tmp_path, lane) as rt:
        lane.fake.push(ToolUseReply(READ_TOOL, {"filename": "PROFILE.md"}, tool_use_id="call_read1"))
        lane.fake.reply_text("Your profile is still empty.")
        reply = await say(rt, "what do you know about me?")
        rows = await stored(rt)

    assert reply == "Your profile is still empty."
    first, second = lane.chat_bodies()
    tools = first["tools"]
    names = [t["name"] if lane.api == "anthropic" else t["function"]["name"] for t in tools]
    assert READ_TOOL in names
    ((call_id, content),) = lane.tool_results(second)
    assert call_id == "call_read1" and "Nothing known yet" in json.dumps(content)
    assert [role for role, _ in rows] == ["user", "assistant", "tool", "assistant"]


async def test_extraction_writes_memory_that_the_next_request_sees(tmp_path: Path, lane: Lane) -> None:
    def respond(recorded: RecordedRequest) -> Script | None:
        if "should_update" in json.dumps(recorded.body):
            return TextReply(MEMORY_REPLY) if "Lyon" in json.dumps(recorded.body) else None
        return TextReply("Noted!")

    lane.fake.responder = respond
    async with running(tmp_path, lane, memory_worker=True) as rt:
        assert rt.memory_services is not None
        worker = rt.memory_services.worker
        loop_task = asyncio.create_task(worker.run())
        try:
            await say(rt, "Hello there, my name is Alice.")
            await say(rt, "I am vegan and I live in Lyon, France.")
            assert await worker.drain(10)
            await say(rt, "What do you know about me?")
        finally:
            loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)
        profile = await rt.core.workspace.get(1, "PROFILE.md")
        usage = {u.purpose: u.calls for u in await rt.core.repos.llm_usage.totals_since("1970")}

    assert profile is not None and "Diet: vegan" in profile.content
    # The next request sees the change, with its message (the cached system prompt stays as it was).
    last = lane.chat_bodies()[-1]
    assert "added: - Diet: vegan" in json.dumps(last["messages"][-1], ensure_ascii=False)
    assert "Diet: vegan" not in lane.system(last)
    assert usage["memory"] >= 1 and usage["chat"] == 3
    # `extraction-prompt: auto` with a server on this machine: the extraction's own prompt on both protocols.
    extractions = [b for b in lane.chat_bodies() if "should_update" in json.dumps(b)]
    assert extractions and all("should_update" in lane.system(b) for b in extractions)


async def test_a_context_length_error_compacts_and_asks_again(tmp_path: Path, lane: Lane) -> None:
    async with running(tmp_path, lane) as rt:
        for text in ("alpaca-one", "bison-two", "camel-three"):
            lane.fake.reply_text(f"answer to {text}")
            await say(rt, text)
        lane.fake.reply_prompt_too_long()
        lane.fake.reply_text("fits now")
        reply = await say(rt, "dingo-four")
        rows = await stored(rt)

    assert reply == "fits now"
    too_long, retry = lane.chat_bodies()[-2:]
    assert len(retry["messages"]) < len(too_long["messages"])
    assert "alpaca-one" in json.dumps(too_long["messages"])
    assert "dingo-four" in json.dumps(retry["messages"][-1]) and "alpaca-one" not in json.dumps(retry["messages"])
    assert rows[-2:] == [("user", "dingo-four"), ("assistant", "fits now")]


@pytest.mark.parametrize("outage", ["server_error", "html_page", "disconnect"])
async def test_an_outage_gets_the_apology_and_keeps_the_message(tmp_path: Path, lane: Lane, outage: str) -> None:
    async with running(tmp_path, lane, **{"max-retries": 1}) as rt:
        fail: Callable[[], None] = {
            "server_error": lambda: lane.fake.reply_error(500, "api_error", "Internal server error"),
            "html_page": lambda: lane.fake.reply_with(_html_page),
            "disconnect": lambda: lane.fake.reply_disconnect(),
        }[outage]
        fail()
        fail()
        reply = await say(rt, "are you there?")
        rows = await stored(rt)
        apology = rt.core.prompts.text("llm_error")
        lane.fake.reply_text("back again")
        assert await say(rt, "hello?") == "back again"

    assert reply == apology
    assert len(lane.chat_bodies()) == 3  # one retry, then the apology; then the next message works
    assert rows == [("user", "are you there?")]


async def _html_page(recorded: RecordedRequest) -> Any:
    from aiohttp import web

    return web.Response(status=502, text="<html><body><h1>502 Bad Gateway</h1></body></html>",
                        content_type="text/html")
