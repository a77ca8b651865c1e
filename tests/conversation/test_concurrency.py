"""200 conversations at once: right replies to the right chats, order kept, no lost writes (SPEC S3, S4, S6)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from bot.llm import AnthropicClient
from bot.app.runtime import Runtime, open_runtime
from channels.base import InboundMessage
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, is_memory_extraction

CONVERSATIONS = 200
TURNS = 3
LATENCY = 0.1
OVERLAP = 10  # chat calls that must be waiting at the fake at the same moment
GIVE_UP = 60.0  # a held answer waits this long at most for its condition (only when the test fails)
TOKEN = re.compile(r"tok-\d+-\d+")
NOTHING_TO_KEEP = json.dumps({"should_update": False, "reason": "small talk",
                              "daily_entry": "", "memory_update": "", "profile_update": ""})


def is_memory_request(recorded: RecordedRequest) -> bool:
    return is_memory_extraction(recorded.body)


def last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else [b["text"] for b in content if b["type"] == "text"][-1]


class Conditions:
    """Holds chat answers at the fake until what the test claims has happened, however slow
    the machine: wall-clock margins between requests say nothing on a loaded machine."""

    def __init__(self) -> None:
        self.waiting = 0
        self.peak = 0  # most chat calls held at the fake at once
        self.overlapped = asyncio.Event()
        self.memory_seen = asyncio.Event()
        self.memory_during_chats = False  # a memory request came while the last chat still waited

    def respond(self, recorded: RecordedRequest) -> Script:
        """Chat: echo the token of the last user message. Memory: instant."""
        if is_memory_request(recorded):
            self.memory_seen.set()
            return TextReply(NOTHING_TO_KEEP)
        token = TOKEN.findall(last_user_text(recorded.body))[-1]
        hold = self._until_memory if token == f"tok-0-{TURNS - 1}" else self._until_overlap
        return TextReply(f"echo {token}", delay=LATENCY, hold=hold)

    async def _until_overlap(self) -> None:
        # Every chat call waits until OVERLAP of them wait together: one at a time never gets there.
        self.waiting += 1
        self.peak = max(self.peak, self.waiting)
        if self.waiting >= OVERLAP:
            self.overlapped.set()
        try:
            await asyncio.wait_for(self.overlapped.wait(), GIVE_UP)
        except TimeoutError:
            self.overlapped.set()  # failed: let the rest through so the test ends and says so
        finally:
            self.waiting -= 1

    async def _until_memory(self) -> None:
        # Chat 0's last answer waits for the memory worker: the chats cannot all end before it runs.
        try:
            await asyncio.wait_for(self.memory_seen.wait(), GIVE_UP)
        except TimeoutError:
            return
        self.memory_during_chats = True


def text_of(i: int, j: int) -> str:
    return f"message {j} of chat {i}, tok-{i}-{j}, tell me something"


async def converse(rt: Runtime, i: int) -> list[tuple[str, str]]:
    """Three messages of one chat, each sent when the previous reply came back."""
    got = []
    for j in range(TURNS):
        reply = await rt.router.handle(InboundMessage("web", f"c{i}", "web", "web", text_of(i, j),
                                                      trigger_source="web"))
        assert reply is not None
        got.append((reply.conversation_id, reply.text))
    return got


async def test_two_hundred_conversations_at_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    conditions = Conditions()
    async with FakeAnthropic() as fake:
        fake.responder = conditions.respond
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0,
                                            "max-concurrency": 256})
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt:
            worker = rt.memory_services.worker
            worker_task = asyncio.create_task(worker.run(), name="memory-worker")
            try:
                results = await asyncio.gather(*(converse(rt, i) for i in range(CONVERSATIONS)))
                assert await rt.router.drain(10)  # memory events are recorded off the reply path
                assert await worker.drain(30)  # the cooldown defers later runs: not waited for
            finally:
                worker_task.cancel()
                await asyncio.gather(worker_task, return_exceptions=True)
            rows = await rt.core.db.fetchall(
                "SELECT conversation_id, role, content FROM mate_message ORDER BY id")
            conversations = {c[0]: c[1] for c in await rt.core.db.fetchall(
                "SELECT id, memory_upto_message_id FROM mate_conversation")}
            pending = {p.conversation_id for p in await rt.core.repos.memory_pending.all()}
            runs = await rt.core.db.fetchall("SELECT conversation_id, status FROM mate_memory_run")

    # every reply went to the chat that asked, with that chat's own token
    for i, got in enumerate(results):
        assert got == [(f"web:c{i}", f"echo tok-{i}-{j}") for j in range(TURNS)]

    # every message stored, once, in per-conversation order (no write lost to "database is locked")
    assert len(rows) == CONVERSATIONS * TURNS * 2
    by_conversation: dict[str, list[tuple[str, str]]] = {}
    for conversation_id, role, content in rows:
        by_conversation.setdefault(conversation_id, []).append((role, content))
    assert len(by_conversation) == CONVERSATIONS
    for i in range(CONVERSATIONS):
        expected = [m for j in range(TURNS) for m in (("user", text_of(i, j)), ("assistant", f"echo tok-{i}-{j}"))]
        assert by_conversation[f"web:c{i}"] == expected

    # no cross-talk: each chat request held one conversation's history, in order
    chat_requests = [r for r in fake.requests if r.path == "/v1/messages" and not is_memory_request(r)]
    assert len(chat_requests) == CONVERSATIONS * TURNS
    for recorded in chat_requests:
        tokens = TOKEN.findall(json.dumps(recorded.body["messages"]))
        i = tokens[-1].split("-")[1]
        assert all(t.split("-")[1] == i for t in tokens)
        assert tokens == sorted(tokens, key=lambda t: int(t.split("-")[2]))

    # the conversations really overlapped: many chat calls were in flight at the same moment
    # (one at a time would never get past 1, however fast the machine)
    assert conditions.peak >= OVERLAP

    # the memory worker ran alongside: every conversation that reached 4 messages was published,
    # and is either analysed (watermark moved) or still pending (deferred by the cooldown)
    memory_requests = [r for r in fake.requests if is_memory_request(r)]
    assert memory_requests
    assert conditions.memory_during_chats  # during the chats, not after them
    for i in range(CONVERSATIONS):
        conversation_id = f"web:c{i}"
        assert conversations[conversation_id] > 0 or conversation_id in pending
    assert {status for _, status in runs} <= {"completed", "skipped"}

    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert problems == [], [r.getMessage() for r in problems][:5]
