"""ChannelMessageRouter: ordering, concurrency, group labels, /new and per-chat agents (SPEC S4)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.conversation.router import RoutedReply
from channels.base import InboundMessage
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, system_text, untimed
from tests.support.messages import blocks
from tests.support.runtime import chat, running

TELEGRAM = {"telegram": {"group-policy": "open", "require-mention": True}}


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


def numbered(fake: FakeAnthropic) -> None:
    """Answer the n-th request with `r<n>`."""

    def respond(recorded: RecordedRequest) -> Script:
        return TextReply(f"r{len(fake.messages_requests())}", input_tokens=0)

    fake.responder = respond


def texts(body: dict[str, Any]) -> list[str]:
    return [untimed(b["text"]) for m in body["messages"] for b in blocks(m) if b["type"] == "text"]


def group(text: str, *, sender: str = "Alice", chat_id: str = "-100", mention: bool = True) -> InboundMessage:
    return InboundMessage("telegram", chat_id, f"id-{sender}", sender, text, is_direct=False,
                          mentions_bot=mention, chat_title="Team")


async def test_one_conversation_is_processed_in_arrival_order(tmp_path: Path, fake: FakeAnthropic) -> None:
    fake.latency = 0.05
    numbered(fake)
    async with running(tmp_path, fake) as rt:
        replies = await asyncio.gather(*(
            rt.router.handle(InboundMessage("console", "me", "me", "me", f"m{i}")) for i in range(5)))

    assert [r.text for r in replies if r] == ["r1", "r2", "r3", "r4", "r5"]
    requests = fake.messages_requests()
    for n, body in enumerate(requests):
        expected = [t for i in range(n) for t in (f"m{i}", f"r{i + 1}")] + [f"m{n}"]
        assert texts(body) == expected


async def test_conversations_run_concurrently(tmp_path: Path, fake: FakeAnthropic) -> None:
    senders = [f"u{i}" for i in range(10)]
    async with running(tmp_path, fake) as rt:
        for sender in senders:  # the chats exist already (their creation race is tested below)
            await chat(rt, f"hello from {sender}", sender=sender)
        fake.latency = 0.2
        replies = await asyncio.gather(*(
            rt.router.handle(InboundMessage("console", s, s, s, f"again from {s}")) for s in senders))

    assert [r.conversation_id for r in replies if r] == [f"console:{s}" for s in senders]
    concurrent = [r for r in fake.requests if r.path == "/v1/messages"][len(senders):]
    assert len(concurrent) == len(senders)
    # every request reached the model before the first one could have been answered
    arrivals = [r.time for r in concurrent]
    assert max(arrivals) - min(arrivals) < 0.2
    for recorded in concurrent:
        sender = texts(recorded.body)[-1].split()[-1]
        assert texts(recorded.body) == [f"hello from {sender}", "ok", f"again from {sender}"]


async def test_first_messages_of_many_new_chats_at_once_are_all_answered(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake) as rt:
        for round_ in range(3):  # the race is timing-dependent: 90 chats make it show on every run
            senders = [f"r{round_}u{i}" for i in range(30)]
            replies = await asyncio.gather(*(
                rt.router.handle(InboundMessage("console", s, s, s, f"hi from {s}")) for s in senders),
                return_exceptions=True)
            failed = [r for r in replies if not isinstance(r, RoutedReply)]
            assert not failed, failed[:3]
            assert [r.conversation_id for r in replies] == [f"console:{s}" for s in senders]


async def test_group_messages_are_stored_with_the_sender_name(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, channels=TELEGRAM) as rt:
        reply = await rt.router.handle(group("hello all"))
        ignored = await rt.router.handle(group("not for the bot", sender="Bob", mention=False))
        assert reply is not None
        stored = await rt.core.repos.messages.after(reply.conversation_id, 0)

    assert reply.conversation_id == "tg:-100"
    assert ignored is None
    assert [(m.role, m.content) for m in stored] == [("user", "[Alice] hello all"), ("assistant", "ok")]
    (request,) = fake.messages_requests()
    assert texts(request) == ["[Alice] hello all"]


async def test_new_archives_and_starts_a_numbered_conversation(tmp_path: Path, fake: FakeAnthropic) -> None:
    numbered(fake)
    async with running(tmp_path, fake) as rt:
        await chat(rt, "remember the old chat")
        answer = await chat(rt, "/new")
        reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", "fresh start"))
        await chat(rt, "/new")
        third = await rt.router.handle(InboundMessage("console", "me", "me", "me", "again"))
        old = await rt.core.repos.conversations.get("console:me")
        second = await rt.core.repos.conversations.get("console:me#2")
        new_text = rt.core.prompts.text("new_conversation")

    assert answer == new_text
    assert reply is not None and reply.conversation_id == "console:me#2"
    assert third is not None and third.conversation_id == "console:me#3"
    assert old is not None and old.archived
    assert second is not None and second.archived
    assert texts(fake.messages_requests()[1]) == ["fresh start"]


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
async def test_empty_messages_are_ignored(tmp_path: Path, fake: FakeAnthropic, text: str) -> None:
    async with running(tmp_path, fake) as rt:
        assert await rt.router.handle(InboundMessage("console", "me", "me", "me", text)) is None
        conversations = await rt.core.repos.conversations.count()

    assert not fake.requests
    assert conversations == 0


async def test_group_chat_gets_its_own_agent_without_the_owner_profile(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running(tmp_path, fake, channels=TELEGRAM) as rt:
        await rt.core.workspace.write(1, "PROFILE.md", "Owner secret: loves durian")
        direct = await rt.router.handle(InboundMessage("console", "me", "me", "me", "hi"))
        first = await rt.router.handle(group("hello group"))
        again = await rt.router.handle(group("hello again", sender="Bob"))
        other = await rt.router.handle(group("another group", chat_id="-200"))

    assert direct is not None and first is not None and again is not None and other is not None
    assert direct.agent_id == 1
    assert first.agent_id != 1
    assert again.agent_id == first.agent_id
    assert other.agent_id not in (1, first.agent_id)
    owner, *groups = fake.messages_requests()
    assert "loves durian" in system_text(owner)
    for body in groups:
        assert "durian" not in system_text(body)
        assert "--- AGENTS.md ---" in system_text(body)  # the new agent has its own seeded workspace
