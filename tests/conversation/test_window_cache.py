"""The in-memory window cache always equals what the database holds."""

from __future__ import annotations

from typing import Any

import json
from pathlib import Path

import pytest

from bot.app.core import Core
from bot.core.content.messages import HistoryItem, decode_content, encode_blocks, history_items
from bot.llm import AnthropicClient, LLMRequest, LLMResponse
from bot.app.runtime import Runtime, open_runtime
from bot.core.records import MessageRecord
from channels.base import InboundMessage
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic

CID = "console:me"


def history_item(record: MessageRecord) -> HistoryItem:
    """A stored message as the window must see it."""
    return HistoryItem(record.id, record.role, decode_content(record.content, record.content_format),
                       record.token_count, record.create_time)


async def _db_window(rt: Runtime) -> list[tuple[int, str, object]]:
    conversation = await rt.core.repos.conversations.get(CID)
    records = await rt.core.repos.messages.after(CID, conversation.summary_upto_message_id)
    return [(i.id, i.role, i.content) for i in map(history_item, records)]


def _cached(rt: Runtime) -> list[tuple[int, str, object]]:
    entry = rt.window._histories[CID]
    return [(i.id, i.role, i.content) for i in entry.items]


async def _say(rt: Runtime, text: str) -> str:
    reply = await rt.router.handle(InboundMessage("console", "me", "me", "Me", text))
    assert reply is not None
    return reply.text


async def test_cache_matches_the_database_through_tools_errors_and_other_writers(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0})
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm,
                                                                         with_memory_worker=False) as rt:
            fake.reply_text("one")
            await _say(rt, "first")
            fake.reply_tool_use("list_workspace_memory_files", {"agentId": 1}, text="Let me look.")
            fake.reply_text("two")
            await _say(rt, "second")
            assert _cached(rt) == await _db_window(rt)
            fake.reply_error(500, "api_error", "boom")
            await _say(rt, "third fails")  # the user message is stored, no reply
            assert _cached(rt) == await _db_window(rt)

            # Another writer adds a message: the next turn must see it (the cache is dropped).
            await rt.core.repos.messages.add(CID, "assistant", "written elsewhere", 3)
            fake.reply_text("four")
            await _say(rt, "fourth")
            sent = json.dumps(fake.messages_requests()[-1]["messages"])
            assert "written elsewhere" in sent
            assert "third fails" in sent and "Let me look." in sent

            fake.reply_text("five")
            await _say(rt, "fifth")
            assert CID in rt.window._histories
            assert _cached(rt) == await _db_window(rt)


class _BrokenOnce:
    """An LLM client whose second call fails with a bug (not an LLMError)."""

    def __init__(self) -> None:
        self.requests: list[LLMRequest] = []

    async def complete(self, request: LLMRequest, on_text: Any = None) -> LLMResponse:
        self.requests.append(request)
        if len(self.requests) == 2:
            raise RuntimeError("bug in the client")
        return LLMResponse(text="ok", content=[{"type": "text", "text": "ok"}])


async def test_a_turn_that_crashes_on_a_warm_window_still_stores_and_caches_its_message(tmp_path: Path) -> None:
    llm = _BrokenOnce()
    async with open_runtime(make_config(tmp_path), llm=llm, with_memory_worker=False) as rt:
        await _say(rt, "first")  # cold: the window is cached from here on
        with pytest.raises(RuntimeError):
            await _say(rt, "second crashes")  # warm: the insert was queued before the call
        assert [(role, content) for _, role, content in await _db_window(rt)] == [
            ("user", "first"), ("assistant", "ok"), ("user", "second crashes")]
        assert _cached(rt) == await _db_window(rt)
        await _say(rt, "third")
        # one call for the third turn (the cache knew the crashed turn's message), and it saw it
        assert len(llm.requests) == 3
        assert "second crashes" in json.dumps(llm.requests[-1].messages)


async def test_the_window_reads_each_message_as_its_stored_record(core: Core) -> None:
    """The window's narrow read (no record object per row) gives what each stored record says:
    text, JSON-looking text, blocks, a tool result, a broken blocks row."""
    repos = core.repos
    await repos.conversations.create(CID, agent_id=1, channel="console", chat_key=CID, trigger_source="console")
    tool_use = [{"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "caf\u00e9 \u2615"}}]
    tool_result = [{"type": "tool_result", "tool_use_id": "t1", "content": "none"}]
    ids = await repos.messages.add_many(CID, [
        ("user", "hello \u2615 \u4f60\u597d", 5),
        ("assistant", '[{"type": "text", "text": "JSON-looking text"}]', 9),
        ("user", "look it up", 3),
        ("assistant", encode_blocks(tool_use), 20, "blocks"),
        ("tool", encode_blocks(tool_result), 6),
        ("assistant", "{not json", 4, "blocks"),
        ("user", "", 0),
    ])
    every = [history_item(r) for r in await repos.messages.after(CID, 0)]
    assert history_items(await repos.messages.window_page(CID, 100, after_id=0, upto_id=1 << 62)) == every
    assert [i.content for i in every][3:6] == [tool_use, tool_result, "{not json"]
    # a page: the newest `limit` in (after_id, upto_id], oldest first
    page = await repos.messages.window_page(CID, 3, after_id=ids[0], upto_id=ids[-2])
    assert history_items(page) == every[3:6]
