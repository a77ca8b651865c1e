"""Memory extraction reads the chat's cached prefix: the same model, tools and system prompt (with
the memory files) as the conversation's last turn, so the provider bills them as a cache read;
otherwise (cache expired or off, another memory model, a group) it sends its own prompt."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from bot.llm.chat_prefix import ChatPrefix, ChatPrefixes
from bot.llm.memory_snapshot import FileChange
from bot.llm import AnthropicClient
from bot.llm.anthropic_messages import request_params
from bot.llm.openai_messages import chat_params
from bot.llm.port import LLMRequest
from bot.core.prompts import PromptLibrary
from bot.app.runtime import Runtime, open_runtime
from memory.extraction.frame import shares_chat_prompt
from memory.workspace.service import MEMORY_FILE, PROFILE_FILE
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, is_memory_extraction, system_text
from tests.support.cache_env import Moment
from tests.support.memory_env import memory_reply
from channels.base import InboundMessage
from tests.support.runtime import chat

CONVERSATION = "console:me"
# Long enough for the provider to cache the prefix (it caches 1 024 tokens or more).
PROFILE = "# User profile\n\n" + "".join(f"- Fact number {n}: likes the colour {n} best on weekdays.\n"
                                         for n in range(120))


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@asynccontextmanager
async def running(tmp_path: Path, fake: FakeAnthropic, moment: Moment, memory: dict[str, str] | None = None,
                  routing_all: bool = False, **llm: str) -> AsyncIterator[Runtime]:
    routing = {"routing": [{"channel": "*", "chat": "*", "agent": 1}]} if routing_all else {}
    config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0, **llm},
                         memory={"profile-max-chars": 20_000, "extraction-prompt": "chat", **(memory or {})},
                         **routing)
    fake.now = moment.seconds
    async with AnthropicClient(config.mate.llm) as client, open_runtime(config, llm=client, clock=moment) as rt:
        await rt.core.workspace.write(1, PROFILE_FILE, PROFILE)
        yield rt
        assert await rt.router.drain(10)


async def two_turns(rt: Runtime, fake: FakeAnthropic, *texts: str, answer: str) -> None:
    for text in texts:
        fake.reply_text(answer)
        await chat(rt, text)


async def extract(rt: Runtime, fake: FakeAnthropic, *replies: str) -> None:
    services = rt.memory_services
    assert services is not None
    for reply in replies:
        fake.reply_text(reply)
    outcome = await services.worker.summarize_now(1, CONVERSATION)
    assert outcome.status == "completed", outcome


def extractions(fake: FakeAnthropic) -> list[RecordedRequest]:
    return [r for r in fake.requests if r.path == "/v1/messages" and is_memory_extraction(r.body)]


def chats(fake: FakeAnthropic) -> list[RecordedRequest]:
    return [r for r in fake.requests if r.path == "/v1/messages" and not is_memory_extraction(r.body)]


def own_prompt(recorded: RecordedRequest) -> bool:
    return "should_update" in system_text(recorded.body)


def first_message(recorded: RecordedRequest) -> str:
    content = recorded.body["messages"][0]["content"]
    return content if isinstance(content, str) else "".join(block.get("text", "") for block in content)


async def test_extraction_after_a_turn_reads_the_chats_prefix_from_the_cache(tmp_path: Path,
                                                                             fake: FakeAnthropic) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment) as rt:
        await two_turns(rt, fake, "I keep bees on my roof in Lisbon.", "They made 4 kg of honey this year.",
                        answer="Lovely!")
        moment.wait(minutes=2)
        await extract(rt, fake, json.dumps({"should_update": True, "reason": "bees", "daily_entry": "- bees",
                                            "profile_edits": [{"append": "- Keeps bees in Lisbon."}]}))
        profile = (await rt.core.workspace.read_text(1, PROFILE_FILE))[0]

    (request,) = extractions(fake)
    turn = chats(fake)[-1]
    assert not own_prompt(request)
    # The prefix byte for byte: the tools, the system prompt and their cache_control marks.
    assert request.body["tools"] == turn.body["tools"] and request.body["system"] == turn.body["system"]
    assert request.body["tool_choice"] == {"type": "none"}
    assert request.usage is not None and request.usage["cache_read_input_tokens"] > 1024
    assert request.usage["cache_creation_input_tokens"] == 0
    prompt = first_message(request)
    assert "should_update" in prompt and "They made 4 kg of honey" in prompt.split("<transcript>", 1)[1]
    assert "Fact number 7" not in prompt  # the files are read from the prefix, not sent again
    assert profile.endswith("- Keeps bees in Lisbon.\n") and "Fact number 119" in profile


async def test_a_change_since_the_turn_is_listed_and_a_whole_file_from_the_old_copy_is_not_written(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment) as rt:
        await two_turns(rt, fake, "My sister Ana lives in Porto.", "She teaches maths there.", answer="Nice.")
        # Changed after the turn (the page, the memory tool): the prefix shows the older copy.
        await rt.core.workspace.write(1, MEMORY_FILE, "# Core memory\n\n- Passport renewal due in May.\n")
        stale_copy = "# Core memory\n\n- Sister Ana teaches maths in Porto.\n"
        await extract(rt, fake, memory_reply(daily="- Ana", memory=stale_copy),
                      memory_reply(daily="- Ana", memory=stale_copy.rstrip() + "\n- Passport renewal due in May.\n"))
        memory = (await rt.core.workspace.read_text(1, MEMORY_FILE))[0]

    shared, own = extractions(fake)
    assert not own_prompt(shared) and own_prompt(own)
    assert "added: - Passport renewal due in May." in first_message(shared)
    assert "Passport renewal due in May." in first_message(own)  # the own prompt shows the file whole
    assert "Passport renewal due in May." in memory and "Sister Ana" in memory


async def test_an_answer_that_is_not_json_through_the_prefix_is_asked_again_with_the_own_prompt(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment) as rt:
        await two_turns(rt, fake, "I started learning the cello.", "Lessons are on Tuesdays.", answer="Great.")
        await extract(rt, fake, "Sure! The cello is a lovely instrument.", memory_reply(daily="- cello lessons"))
        notes = [f for f in await rt.core.workspace.list(1, "memory/")]

    assert [own_prompt(r) for r in extractions(fake)] == [False, True]
    assert len(notes) == 1


@pytest.mark.parametrize("settings, memory, wait", [
    ({"cache": "off"}, {}, timedelta(minutes=1)),
    ({"memory-model": "claude-memory-small"}, {}, timedelta(minutes=1)),
    ({}, {}, timedelta(hours=2)),  # the chat's cache has expired
    ({}, {"extraction-prompt": "own"}, timedelta(minutes=1)),  # asked for by the owner
])
async def test_the_own_prompt_when_the_prefix_is_not_in_the_cache_for_that_model_or_not_wanted(
    tmp_path: Path, fake: FakeAnthropic, settings: dict[str, str], memory: dict[str, str], wait: timedelta,
) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment, memory, **settings) as rt:
        await two_turns(rt, fake, "I moved to Berlin in March.", "I work at a bakery there.", answer="Okay.")
        moment.wait(seconds=wait.total_seconds())
        await extract(rt, fake, memory_reply(daily="- Berlin"))

    (request,) = extractions(fake)
    assert own_prompt(request) and "tools" not in request.body and "tool_choice" not in request.body
    assert "Fact number 7" in first_message(request)


def test_a_prefix_is_shared_only_while_its_cache_lives_and_for_its_own_model() -> None:
    start = datetime(2026, 3, 4, 9, 0, tzinfo=timezone.utc)
    prefixes = ChatPrefixes()
    prefixes.sent("c", ChatPrefix("m", "system", 0, [], "5m", start))
    assert prefixes.warm("c", "m", start + timedelta(minutes=4)) is not None
    assert prefixes.warm("c", "m", start + timedelta(minutes=5)) is None
    assert prefixes.warm("c", "other", start) is None
    assert prefixes.warm("c", "m", start - timedelta(minutes=1)) is None  # a clock moved back
    prefixes.sent("c", ChatPrefix("m", "new system", 0, [], "1h", start))  # a new prefix, written for the hour
    assert prefixes.warm("c", "m", start + timedelta(minutes=50)) is not None
    prefixes.sent("c", None)  # a turn sent uncached
    assert prefixes.warm("c", "m", start) is None


def test_a_prefix_written_for_five_minutes_stays_so_while_later_turns_write_their_history_for_the_hour() -> None:
    start = datetime(2026, 3, 4, 9, 0, tzinfo=timezone.utc)
    prefixes = ChatPrefixes()
    prefixes.sent("c", ChatPrefix("m", "system", 0, [], "5m", start))  # a session's first turn
    # Two minutes on, the next turn reads that entry (renewing it for 5 minutes) and writes its
    # history for the hour.
    prefixes.sent("c", ChatPrefix("m", "system", 0, [], "1h", start + timedelta(minutes=2)))
    assert prefixes.warm("c", "m", start + timedelta(minutes=6)) is not None
    assert prefixes.warm("c", "m", start + timedelta(minutes=8)) is None  # the tools-and-system entry expired
    assert prefixes.warm("c", "m", start + timedelta(minutes=50), history=True) is not None
    # A turn ten minutes on reads through the history's entry: the shorter one is not renewed.
    prefixes.sent("c", ChatPrefix("m", "system", 0, [], "1h", start + timedelta(minutes=12)))
    assert prefixes.warm("c", "m", start + timedelta(minutes=13)) is None
    assert prefixes.warm("c", "m", start + timedelta(minutes=70), history=True) is not None


def test_the_shared_prompt_renders_in_both_locales() -> None:
    for locale, removed in (("en", "removed: - old"), ("zh-CN", "删除：- old")):
        text = PromptLibrary(locale).render(
            "memory/summarize-shared", instructions="INSTRUCTIONS", date="2026-03-04",
            changes=[FileChange(MEMORY_FILE, ("- new",), ("- old",))], unshown=(PROFILE_FILE,), profile_chars=10,
            profile_max_chars=4000,
            memory_chars=20, memory_max_chars=12000, daily_note="", daily_note_omitted=0, earlier_context="",
            transcript="User: hi", asked_to_remember="- my sister's birthday is in March")
        assert "my sister's birthday is in March" in text.split("</transcript>", 1)[1]
        assert "INSTRUCTIONS" in text and removed in text and "<transcript>\nUser: hi\n</transcript>" in text
        assert PROFILE_FILE in text.split("MEMORY.md", 2)[1]  # named as not shown above


def test_tools_that_may_not_be_called_are_sent_with_tool_choice_none_on_both_protocols() -> None:
    tool = {"name": "search_memory", "description": "d", "input_schema": {"type": "object", "properties": {}}}
    shared = LLMRequest(model="m", system="s", messages=[{"role": "user", "content": "hi"}], max_tokens=10,
                        tools=[tool], tool_choice="none")
    assert request_params(shared)["tool_choice"] == {"type": "none"}
    assert chat_params(shared)["tool_choice"] == "none"
    callable_ = LLMRequest(model="m", system="s", messages=[{"role": "user", "content": "hi"}], max_tokens=10,
                           tools=[tool])
    assert "tool_choice" not in request_params(callable_) and "tool_choice" not in chat_params(callable_)


@pytest.mark.parametrize("api, base_url, choice, shares", [
    ("anthropic", "", "auto", True), ("anthropic", "https://api.anthropic.com", "auto", True),
    ("anthropic", "https://eu.api.anthropic.com/v1", "auto", True),
    ("anthropic", "https://gateway.example.com/anthropic", "auto", False),
    ("anthropic", "http://127.0.0.1:8080", "auto", False),
    ("anthropic", "http://host.docker.internal:11434", "auto", False),
    ("anthropic", "https://anthropic.com.evil.example", "auto", False),
    ("openai", "", "auto", False), ("openai", "https://api.openai.com/v1", "auto", False),
    ("anthropic", "http://127.0.0.1:8080", "chat", True), ("openai", "", "chat", True),
    ("anthropic", "", "own", False),
])
def test_auto_shares_the_chat_prompt_with_anthropics_own_api_only(
    tmp_path: Path, api: str, base_url: str, choice: str, shares: bool,
) -> None:
    config = make_config(tmp_path, llm={"api": api, "api-key": "k", "base-url": base_url},
                         memory={"extraction-prompt": choice})
    assert shares_chat_prompt(config.mate) is shares


async def test_a_request_the_provider_refuses_through_the_prefix_is_asked_with_the_own_prompt_in_one_run(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment) as rt:
        await two_turns(rt, fake, "I started running on Sundays.", "Ten kilometres so far.", answer="Nice.")
        fake.reply_error(400, "invalid_request_error", "tool_choice: unknown type 'none'")
        await extract(rt, fake, memory_reply(daily="- running"))
        runs = await rt.core.repos.memory_runs.for_conversation(CONVERSATION)

    assert [own_prompt(r) for r in extractions(fake)] == [False, True]
    assert [r.status for r in runs if r.kind == "summarize"] == ["completed"]


async def test_an_edit_of_a_line_changed_since_the_turn_is_redone_with_the_own_prompt(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment) as rt:
        await two_turns(rt, fake, "Actually my favourite colour is teal.", "Please remember that.", answer="Noted.")
        text, version = await rt.core.workspace.read_text(1, PROFILE_FILE)
        await rt.core.workspace.write(1, PROFILE_FILE, text.replace("Fact number 3:", "Fact three:"),
                                      expected_version=version)
        stale_edit = json.dumps({"should_update": True, "reason": "colour", "daily_entry": "- teal",
                                 "profile_edits": [{"old": "- Fact number 3:", "new": "- Favourite colour teal."}]})
        fresh_edit = json.dumps({"should_update": True, "reason": "colour", "daily_entry": "- teal",
                                 "profile_edits": [{"append": "- Favourite colour: teal."}]})
        await extract(rt, fake, stale_edit, fresh_edit)
        profile = (await rt.core.workspace.read_text(1, PROFILE_FILE))[0]

    shared, own = extractions(fake)
    assert not own_prompt(shared) and "removed: - Fact number 3:" in first_message(shared)
    assert own_prompt(own)
    assert "Fact three:" in profile and profile.endswith("- Favourite colour: teal.\n")


async def test_too_many_changes_since_the_turn_send_the_own_prompt(tmp_path: Path, fake: FakeAnthropic) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment) as rt:
        await two_turns(rt, fake, "I am planning a trip to Japan.", "Probably in April.", answer="Great.")
        await rt.core.workspace.write(1, MEMORY_FILE, "# Core memory\n\n" + "".join(
            f"- Project note {n}: the quarterly report needs section {n} reviewed.\n" for n in range(80)))
        await extract(rt, fake, memory_reply(daily="- Japan in April"))

    (request,) = extractions(fake)
    assert own_prompt(request)


async def test_a_group_never_shares_the_chat_prompt(tmp_path: Path, fake: FakeAnthropic) -> None:
    moment = Moment()
    async with running(tmp_path, fake, moment, routing_all=True) as rt:
        for text in ("we are planning the summer trip together", "it should be somewhere warm and sunny"):
            fake.reply_text("Sounds fun.")
            message = InboundMessage("console", "room", "u1", "Alexandra", text, is_direct=False,
                                     mentions_bot=True, trigger_source="console")
            await rt.router.handle(message)
        assert await rt.router.drain(5)
        conversation = await rt.router.conversation_for(message, await rt.router.agent_for(message))
        assert conversation.is_group
        fake.reply_text(json.dumps({"should_update": True, "reason": "trip", "daily_entry": "- trip"}))
        services = rt.memory_services
        assert services is not None
        outcome = await services.worker.summarize_now(1, conversation.id)
        assert outcome.status == "completed", outcome

    (request,) = extractions(fake)
    assert own_prompt(request) and "tools" not in request.body
