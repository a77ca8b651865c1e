"""End to end: chat -> event -> memory worker -> workspace -> the very next request."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from bot.schedule.system_tasks import SystemTaskRunner
from bot.llm import AnthropicClient
from bot.app.runtime import open_runtime
from channels.base import InboundMessage
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, TextReply, untimed, is_memory_extraction
from tests.support.recall_env import talk
from tests.support.recall_env import segments

MEMORY_REPLY = json.dumps({
    "should_update": True, "reason": "the user shared stable facts",
    "daily_entry": "- Alice said she is vegan and lives in Lyon",
    "memory_update": "", "profile_update": "# Profile\n\n- Name: Alice\n- Diet: vegan\n- City: Lyon",
})


def _is_memory_request(request: RecordedRequest) -> bool:
    return is_memory_extraction(request.body)


def _say(text: str) -> InboundMessage:
    return InboundMessage("console", "alice", "alice", "Alice", text, trigger_source="console")


async def test_new_profile_reaches_the_very_next_chat_request(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        fake.responder = lambda r: TextReply(MEMORY_REPLY) if _is_memory_request(r) else TextReply("Noted!")
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
                             memory={"cooldown-minutes": 0})
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt:
            worker = rt.memory_services.worker
            loop_task = asyncio.create_task(worker.run())
            try:
                await rt.router.handle(_say("Hello there, my name is Alice."))
                await rt.router.handle(_say("I am vegan and I live in Lyon, France."))
                assert await rt.router.drain(5)  # the memory event is recorded off the reply path
                assert await worker.drain(10)
                memory_requests = [r for r in fake.requests if _is_memory_request(r)]
                assert len(memory_requests) == 1
                transcript = memory_requests[0].body["messages"][0]["content"]
                assert "User: I am vegan and I live in Lyon, France." in json.dumps(transcript, ensure_ascii=False)
                await rt.router.handle(_say("What do you know about me?"))
            finally:
                loop_task.cancel()
                await asyncio.gather(loop_task, return_exceptions=True)
            chat_requests = [r for r in fake.requests if not _is_memory_request(r)]
            # The change reaches the model with the message; the cached system prompt stays as it was.
            assert "added: - Diet: vegan" in json.dumps(chat_requests[-1].body["messages"][-1], ensure_ascii=False)
            assert "Diet: vegan" not in json.dumps(chat_requests[-1].body["system"], ensure_ascii=False)
            daily = [f for f in await rt.core.workspace.list(1, "memory/")]
            assert len(daily) == 1 and not daily[0].enabled
            assert daily[0].content.startswith(f"# {daily[0].filename[7:17]}\n")
            # The third exchange was published after the loop stopped: it stays pending, whole.
            assert await rt.router.drain(5)
            (pending,) = await rt.core.repos.memory_pending.all()
            assert pending.upto_message_id == await rt.core.repos.messages.last_id("console:alice")


async def test_cron_conversation_is_not_summarised(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        fake.responder = lambda r: TextReply(MEMORY_REPLY) if _is_memory_request(r) else TextReply("Done.")
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
                             memory={"cooldown-minutes": 0, "min-messages-for-summarize": 0})
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt:
            worker = rt.memory_services.worker
            loop_task = asyncio.create_task(worker.run())
            try:
                (job,) = await rt.core.repos.tasks.system_tasks(1)
                await SystemTaskRunner(rt.router, rt.memory_services.emergence, rt.consolidation_turns,
                                          rt.core.repos.search_index)(job)
                assert await worker.drain(5)
            finally:
                loop_task.cancel()
                await asyncio.gather(loop_task, return_exceptions=True)
            assert [r for r in fake.requests if _is_memory_request(r)] == []
            chat = fake.messages_requests()
            assert len(chat) == 1 and untimed(chat[0]["messages"][0]["content"]) == job.message
            conversations = await rt.core.db.fetchall("SELECT trigger_source FROM mate_conversation")
            assert [r[0] for r in conversations] == ["cron"]


def _is_summary_request(request: RecordedRequest) -> bool:
    return "You compress the earlier part of a conversation" in json.dumps(request.body.get("system", ""))


async def test_compaction_leaves_folded_messages_to_the_worker_without_waiting_for_it(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        def respond(request: RecordedRequest) -> TextReply:
            if _is_memory_request(request):
                return TextReply(MEMORY_REPLY)
            if _is_summary_request(request):
                return TextReply("Alice talked about her travel plans.")
            return TextReply("Sounds good.")

        fake.responder = respond
        config = make_config(
            tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
            memory={"cooldown-minutes": 60},
            agent={"conversation": {"window": {"default-max-input-tokens": 6000, "preserve-recent-pairs": 1}}},
        )
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt:
            paragraph = "I am planning a long train journey across Europe next summer. " * 40
            compacted = False
            for turn in range(20):
                await rt.router.handle(_say(f"Part {turn}: {paragraph}"))
                if any(_is_summary_request(r) for r in fake.requests):
                    compacted = True
                    break
            assert compacted, "the window never compacted"
            assert not any(_is_memory_request(r) for r in fake.requests)  # the reply never waited on one
            assert await rt.router.drain(5)
            conversation = await rt.core.repos.conversations.get("console:alice")
            pending = await rt.core.repos.memory_pending.get("console:alice")
            assert pending is not None and pending.upto_message_id >= conversation.summary_upto_message_id > 0
            worker = rt.memory_services.worker
            loop_task = asyncio.create_task(worker.run())
            try:
                assert await worker.drain(10)
            finally:
                loop_task.cancel()
                await asyncio.gather(loop_task, return_exceptions=True)
            conversation = await rt.core.repos.conversations.get("console:alice")
            assert conversation.memory_upto_message_id >= conversation.summary_upto_message_id
            memory_request = next(r for r in fake.requests if _is_memory_request(r))
            assert "Part 0:" in json.dumps(memory_request.body["messages"], ensure_ascii=False)


def _in_group(text: str, sender_name: str) -> InboundMessage:
    return InboundMessage("console", "room", "u1", sender_name, text, is_direct=False, mentions_bot=True,
                          trigger_source="console")


async def test_group_name_prefix_does_not_count_toward_the_length_pre_check(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
                             routing=[{"channel": "*", "chat": "*", "agent": 1}])
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt:
            for text in ("we are planning the summer trip", "it should be somewhere warm"):
                await rt.router.handle(_in_group(text, "Alexandra"))
            assert await rt.router.drain(5)
            before = await rt.core.repos.memory_pending.all()
            await rt.core.repos.memory_pending.delete(before[0].conversation_id)
            await rt.router.handle(_in_group("ok, fine", "Alexandra"))  # "[Alexandra] ok, fine" is 20 chars
            assert await rt.router.drain(5)
            after = await rt.core.repos.memory_pending.all()
            stored = await rt.core.repos.messages.after(before[0].conversation_id, 0)
    assert len(before) == 1  # the long messages passed
    assert stored[-2].content == "[Alexandra] ok, fine"  # the model still sees who spoke
    assert after == []  # "ok, fine" is 8 characters, under the minimum of 10


async def test_the_nightly_consolidation_leaves_the_search_index_merged(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        fake.responder = lambda r: TextReply("Done.")
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0})
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt:
            for day in range(3):  # each message its own transaction: the index in pieces
                await talk(rt.core, f"console:{day}", 1, "The canoe is blue.", "Nice canoe.")
            assert all(count > 1 for count in (await segments(rt.core)).values())
            (job,) = await rt.core.repos.tasks.system_tasks(1)
            await SystemTaskRunner(rt.router, rt.memory_services.emergence, rt.consolidation_turns,
                                      rt.core.repos.search_index)(job)
            assert all(count == 1 for count in (await segments(rt.core)).values())
