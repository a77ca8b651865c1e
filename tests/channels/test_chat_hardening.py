"""SPEC S33 on the chat side, through the real PTB client on the fake Bot API, the real anthropic SDK
on the fake Messages API and real SQLite: a reply bounded whatever the model writes, a voice note
transcribed beside the chat's typed messages, /memory for everyone's own agent, Telegram /start."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.app.api.server import ApiServer
from bot.core.clock import Clock, iso
from bot.llm import AnthropicClient
from bot.core.prompts import PromptLibrary
from bot.app.runtime import open_runtime
from channels.base import IncomingFile, InboundMessage, ReplyStream
from channels.console import ConsoleChannel, _Printed
from channels.telegram.adapter import TelegramChannel
from memory.workspace.service import MEMORY_FILE
from tests.support.eventually import eventually
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, TextReply
from tests.support.fakes.telegram import FakeTelegram
from tests.support.fakes.transcription import FakeTranscription, spoken
from tests.support.telegram_env import ADMIN, Env, FRIEND, GROUP, TOKEN

PROMPTS = PromptLibrary("en")
CUT = PROMPTS.text("reply_cut")
FLOOD = "word " * 20_000  # 100 000 characters: a server that ignores max_tokens
POLL = 0.02


def ticking_clock(start: datetime = datetime(2026, 3, 4, 9, 0, tzinfo=timezone.utc)) -> Clock:
    """A clock one second later at every reading: times stored one after the other differ."""
    state = {"now": start}

    def now() -> datetime:
        state["now"] += timedelta(seconds=1)
        return state["now"]

    return now


@asynccontextmanager
async def chat(
    tmp_path: Path, *, stream: bool = True, stt: FakeTranscription | None = None, clock: Clock | None = None,
    **mate: Any,
) -> AsyncIterator[Env]:
    """The daemon's pipeline on the fake Bot API: ADMIN is the admin, FRIEND an allowed user."""
    media: dict[str, Any] = {}
    if stt is not None:
        media["transcription"] = {"base-url": stt.base_url, "model": "whisper-1"}
    async with FakeAnthropic(default_text="hello from the model") as fake_llm, FakeTelegram() as fake_tg:
        config = make_config(
            tmp_path, media=media,
            # Room for a 100 000-character answer: the fake, like the real API, cuts at max_tokens.
            llm={"api-key": "k", "base-url": fake_llm.url, "max-retries": 0, "max-output-tokens": 128_000,
                 "stream": stream},
            channels={"telegram": {"enabled": True, "token": TOKEN, "base-url": fake_tg.base_url,
                                   "admins": [str(ADMIN)], "allowed-users": [str(FRIEND)],
                                   "group-policy": "open"}},
            **mate,
        )
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(
                config, llm=llm, with_memory_worker=False, clock=clock or ticking_clock()) as rt:
            channel = TelegramChannel(config.mate.channels.telegram, rt.router.handle, rt.core.prompts,
                                      poll_timeout=0.2, backoff_base=0.05, backoff_max=0.2, busy_poll_interval=0.05)
            task = asyncio.create_task(channel.run())
            try:
                yield Env(fake_tg, fake_llm, rt, config, channel, task)
            finally:
                await channel.stop()
                await task


def sent_to(env: Env, chat_id: int) -> list[str]:
    return [str(s["text"]) for s in env.tg.sent if int(s["chat_id"]) == chat_id]


async def say(env: Env, text: str, *, user: int, chat_id: int | None = None, chat_type: str = "private") -> str:
    """`text` from `user` (in their direct chat unless `chat_id`), and the one answer to it."""
    chat_id = user if chat_id is None else chat_id
    before = len(sent_to(env, chat_id))
    env.tg.push_text(text, chat_id=chat_id, user_id=user, chat_type=chat_type, first_name=f"user{user}")
    await eventually(lambda: len(sent_to(env, chat_id)) > before, f"an answer to {text!r}")
    return sent_to(env, chat_id)[before]


# -- a reply is bounded ------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_flood_of_an_answer_reaches_telegram_cut_at_max_reply_chars(tmp_path: Path, stream: bool) -> None:
    limit = 20_000  # the default of mate.channels.max-reply-chars
    async with chat(tmp_path, stream=stream) as env:
        assert env.config.mate.channels.max_reply_chars == limit
        env.llm.reply_text(FLOOD)
        env.tg.push_text("tell me everything", chat_id=ADMIN, user_id=ADMIN)
        await eventually(lambda: any(text.endswith(CUT) for text in sent_to(env, ADMIN)), "the cut marker")
        await env.settle()  # nothing more comes after it
        texts = sent_to(env, ADMIN)

    assert len(env.llm_requests()) == 1 and len(env.llm_requests()[0]["messages"]) == 1
    assert texts[0].startswith("word word") and texts[-1].endswith("\n\n" + CUT)
    assert sum(len(text) for text in texts) <= limit + len(CUT)
    assert len(texts) <= 6  # not the 25 a 100 000-character answer takes
    assert all(len(draft["text"]) <= 4096 for draft in env.tg.drafts)


async def test_a_streamed_web_reply_stops_being_forwarded_at_max_reply_chars(tmp_path: Path) -> None:
    limit = 1_000
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0,
                                            "max-output-tokens": 128_000},
                             api={"port": 0, "token": ""}, channels={"max-reply-chars": limit})
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt, \
                ApiServer(rt, config.mate.api) as server, aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{server.port}/api/v1/chat/1"
            fake.reply_text(FLOOD)
            async with http.post(base + "/stream", json={"message": "tell me everything"}) as response:
                raw = await response.text()
            fake.reply_text(FLOOD)
            async with http.post(base, json={"message": "and again, without streaming"}) as response:
                plain = await response.json()

    events = [(block.split("\n")[0].removeprefix("event: "), json.loads(block.split("data: ", 1)[1]))
              for block in raw.strip().split("\n\n")]
    streamed = "".join(data["text"] for kind, data in events if kind == "delta")
    done = events[-1][1]
    assert events[-1][0] == "done" and done["reply"].endswith(CUT) and len(done["reply"]) <= limit + len(CUT)
    assert streamed.startswith("word word") and streamed.endswith(CUT) and len(streamed) <= limit + len(CUT)
    assert plain["reply"].endswith(CUT) and len(plain["reply"]) <= limit + len(CUT)


# -- a voice note beside the typed messages ----------------------------------------------------


async def test_a_typed_message_is_answered_while_a_voice_note_is_transcribed(tmp_path: Path) -> None:
    async with FakeTranscription(hang=True) as stt, chat(tmp_path, stt=stt) as env:
        env.llm.reply_text("Answer to the typed message.")
        env.llm.reply_text("Answer to the voice note.")
        env.tg.push_voice(spoken("remind me to buy milk"), duration=3, chat_id=ADMIN, user_id=ADMIN)
        await eventually(lambda: len(stt.requests) == 1, "the voice note at the transcription endpoint")
        env.tg.push_text("are you there?", chat_id=ADMIN, user_id=ADMIN)
        try:
            [typed] = await env.tg.wait_for_sent(1)
            pending = stt.hang and len(env.llm_requests()) == 1  # the note is still being transcribed
        finally:
            stt.release()  # also when it failed: the channel stops only once the note is answered
        await env.tg.wait_for_sent(2)
        rows = await env.rt.core.repos.messages.after(f"tg:{ADMIN}", 0)

    assert typed["text"] == "Answer to the typed message." and pending
    assert env.tg.sent[1]["text"] == "Answer to the voice note."
    assert [row.content for row in rows] == ["are you there?", "Answer to the typed message.",
                                             "[voice] remind me to buy milk", "Answer to the voice note."]
    typed_row, voice_row = rows[0], rows[2]
    assert voice_row.create_time < typed_row.create_time  # kept with the time it came, before the typed one


async def test_a_chats_voice_notes_are_answered_in_the_order_they_came(tmp_path: Path) -> None:
    async with FakeTranscription(hang=True) as stt, chat(tmp_path, stt=stt) as env:
        env.tg.push_voice(spoken("first note"), duration=3, chat_id=ADMIN, user_id=ADMIN)
        await eventually(lambda: len(stt.requests) == 1, "the first note at the transcription endpoint")
        env.tg.push_voice(spoken("second note"), duration=3, chat_id=ADMIN, user_id=ADMIN)
        try:
            await env.settle()
            waiting = len(stt.requests)  # the second waits behind the first: its chat's notes keep their order
        finally:
            stt.release()
        await env.tg.wait_for_sent(2)
        stored = [m.content for m in await env.rt.core.repos.messages.after(f"tg:{ADMIN}", 0)]

    assert waiting == 1
    assert stored[0] == "[voice] first note" and stored[2] == "[voice] second note"


# -- /memory show, why, history for everyone's own agent ----------------------------------------


async def _two_memories(env: Env) -> int:
    """The owner's agent and FRIEND's own agent, each with a memory of its own; FRIEND's agent id."""
    await say(env, "/whoami", user=FRIEND)  # FRIEND's own agent is made on first contact
    conversation = await env.rt.core.repos.conversations.active_for_chat(f"tg:{FRIEND}")
    assert conversation is not None
    friend_agent = conversation.agent_id
    assert friend_agent != 1
    workspace = env.rt.core.workspace
    await workspace.write(1, "MEMORY.md", "- The owner's safe code is 4711.")
    await workspace.write(friend_agent, "MEMORY.md", "- Likes green tea in the morning.")
    return friend_agent


async def test_a_person_reads_their_own_agents_memory_in_their_direct_chat(tmp_path: Path) -> None:
    async with chat(tmp_path) as env:
        await _two_memories(env)
        shown = await say(env, "/memory show", user=FRIEND)
        why = await say(env, "/memory why green tea", user=FRIEND)
        history = await say(env, "/memory history", user=FRIEND)
        # Nothing names another agent's memory: the owner's text is not found in theirs.
        other = await say(env, "/memory why safe code", user=FRIEND)
        approve = await say(env, "/memory approve 1", user=FRIEND)
        search = await say(env, "/memory search safe code", user=FRIEND)
        summarize = await say(env, "/memory summarize", user=FRIEND)

    assert "green tea" in shown and "4711" not in shown
    assert "MEMORY.md" in why and "green tea" in why
    assert "MEMORY.md" in history and "4711" not in history
    assert other == PROMPTS.text("why_none", text="safe code")
    assert [approve, search, summarize] == [PROMPTS.text("not_admin")] * 3


async def test_memory_of_a_shared_agent_and_in_a_group_stays_the_admins(tmp_path: Path) -> None:
    shared = [{"channel": "*", "chat": "direct", "agent": 1}, {"channel": "*", "chat": "group", "agent": 1}]
    async with chat(tmp_path, routing=shared) as env:
        await env.rt.core.workspace.write(1, "MEMORY.md", "- The owner's safe code is 4711.")
        in_shared = await say(env, "/memory show", user=FRIEND)
        in_group = await say(env, "/memory show", user=FRIEND, chat_id=GROUP, chat_type="group")
        history_in_group = await say(env, "/memory history", user=FRIEND, chat_id=GROUP, chat_type="group")
        admin = await say(env, "/memory show", user=ADMIN)

    assert in_shared == PROMPTS.text("memory_not_own")
    assert in_group == history_in_group == PROMPTS.text("not_admin")
    assert "4711" in admin


# -- Telegram /start ---------------------------------------------------------------------------


async def test_start_greets_and_lists_the_commands_that_person_may_use(tmp_path: Path) -> None:
    async with chat(tmp_path) as env:
        admin = await say(env, "/start", user=ADMIN)
        friend = await say(env, "/start", user=FRIEND)
        in_group = await say(env, "/start", user=FRIEND, chat_id=GROUP, chat_type="group")

    for answer in (admin, friend, in_group):
        assert answer.startswith("Hello! I am") and "/new" in answer and "/tasks" in answer
    assert "/memory emerge" in admin and "/memory search" in admin and "/memory show" in admin
    assert "/memory show" in friend and "/memory why" in friend and "/undo" in friend
    assert "/memory emerge" not in friend and "/memory search" not in friend and "(admin)" not in friend
    assert "/memory" not in in_group and "/undo" not in in_group and "/incognito" not in in_group


async def test_start_is_localised(tmp_path: Path) -> None:
    async with chat(tmp_path, locale="zh-CN") as env:
        answer = await say(env, "/start", user=FRIEND)
    chinese = PromptLibrary("zh-CN")
    assert answer.startswith("你好！") and chinese.text("start_own_memory").splitlines()[0] in answer


# -- the cap holds in what is kept, over a whole reply, and on the console ----------------------


@pytest.mark.parametrize("broken", [False, True])
async def test_the_history_keeps_the_reply_as_cut_not_the_flood(tmp_path: Path, broken: bool) -> None:
    limit = 20_000
    async with chat(tmp_path) as env:
        if broken:  # the stream breaks off after more than the cap: the part shown is kept, cut too
            env.llm.push(TextReply(FLOOD, break_after_chars=60_000))
        else:
            env.llm.reply_text(FLOOD)
        answer = await say(env, "tell me everything", user=ADMIN)
        await eventually(lambda: any(CUT in text for text in sent_to(env, ADMIN)), "the cut marker")
        rows = await env.rt.core.repos.messages.after(f"tg:{ADMIN}", 0)

    kept = rows[-1]
    assert answer.startswith("word word")
    assert kept.role == "assistant" and kept.content.endswith("\n\n" + CUT)
    assert len(kept.content) <= limit + len(CUT)


async def test_one_budget_holds_for_a_whole_streamed_reply_across_tool_rounds(tmp_path: Path) -> None:
    limit = 1_000
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0,
                                            "max-output-tokens": 128_000},
                             api={"port": 0, "token": ""}, channels={"max-reply-chars": limit})
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt, \
                ApiServer(rt, config.mate.api) as server, aiohttp.ClientSession() as http:
            fake.reply_tool_use("no_such_tool", {}, text="before the tool " * 50)  # 800 characters
            fake.reply_text("after the tool " * 60)  # 900 characters
            async with http.post(f"http://127.0.0.1:{server.port}/api/v1/chat/1/stream",
                                 json={"message": "look it up"}) as response:
                raw = await response.text()

    events = [(block.split("\n")[0].removeprefix("event: "), json.loads(block.split("data: ", 1)[1]))
              for block in raw.strip().split("\n\n")]
    streamed = "".join(data["text"] for kind, data in events if kind == "delta")
    assert "status" in [kind for kind, _ in events] and events[-1][0] == "done"
    # The page appends every delta to one bubble: the two rounds together stay within the cap.
    assert streamed.startswith("before the tool") and "after the tool" in streamed
    assert streamed.endswith(CUT) and len(streamed) <= limit + len(CUT)


async def _console_output(tmp_path: Path, answer: str, limit: int) -> str:
    output = io.StringIO()
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
                             channels={"max-reply-chars": limit})
        async with AnthropicClient(config.mate.llm) as llm, \
                open_runtime(config, llm=llm, with_memory_worker=False) as rt:
            fake.reply_text(answer)

            async def handle(message: InboundMessage, stream: ReplyStream) -> str | None:
                reply = await rt.router.handle(message, stream=stream)
                return reply.text if reply else None

            reader = asyncio.StreamReader()
            reader.feed_data(b"tell me everything\n")
            reader.feed_eof()
            await ConsoleChannel(handle, reader=reader, output=output, user="me",
                                 prompts=rt.core.prompts).run()
    return output.getvalue()


@pytest.mark.parametrize(("answer", "limit"), [
    ("\n" + "abcdefghij" * 100, 200),  # the stream counts the opening line end, the reply is stripped
    ("word " * 100, 202), ("word " * 100, 203), ("word " * 100, 204),  # cut in the spaces
])
async def test_the_console_prints_a_cut_reply_once(tmp_path: Path, answer: str, limit: int) -> None:
    text = await _console_output(tmp_path, answer, limit)
    assert text.count(CUT) == 1
    assert len(text) <= limit + len(CUT) + len("you> \n\nyou> \n")  # printed once, not again at the end


def test_the_console_prints_a_cut_replys_notice_not_the_reply_again() -> None:
    lines: list[str] = []

    def write(text: str, newline: bool = True) -> None:
        lines.append(text + ("\n" if newline else ""))

    printed = _Printed(write, CUT)
    printed.text("word " * 39 + "wor" + "\n\n" + CUT)  # the stream's cut, at its own offset
    printed.finish("(I missed a reminder: call mum)\n\n" + "word " * 30 + "word\n\n" + CUT)
    out = "".join(lines)
    assert out.count(CUT) == 1 and out.count("call mum") == 1
    assert out.endswith(CUT + "\n(I missed a reminder: call mum)\n")


# -- voice notes: their arrival time, a redelivery -----------------------------------------------


class PinnedClock:
    """A clock that stands where the test sets it."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def voice_message(words: str, external_id: str) -> InboundMessage:
    data = spoken(words)

    async def read() -> bytes:
        return data

    note = IncomingFile("voice.oga", "audio/ogg", len(data), read, is_voice=True, duration=3)
    return InboundMessage(channel="telegram", chat_id=str(ADMIN), sender_id=str(ADMIN), sender_name="admin",
                          text="", is_direct=True, external_id=external_id, files=(note,))


async def test_a_voice_note_waiting_behind_another_keeps_the_time_it_came(tmp_path: Path) -> None:
    first_came, second_came = datetime(2026, 3, 4, 9, 0, tzinfo=timezone.utc), datetime(2026, 3, 4, 9, 1,
                                                                                            tzinfo=timezone.utc)
    clock = PinnedClock(first_came)
    async with FakeTranscription(hang=True) as stt, chat(tmp_path, stt=stt, clock=clock) as env:
        router = env.rt.router
        first = asyncio.create_task(router.handle(voice_message("first note", "501")))
        await eventually(lambda: len(stt.requests) == 1, "the first note at the transcription endpoint")
        clock.now = second_came
        second = asyncio.create_task(router.handle(voice_message("second note", "502")))
        lanes = router._voice_lanes._locks
        await eventually(lambda: lanes.get(f"tg:{ADMIN}", (None, 0))[1] == 2, "the second note waiting")
        clock.now = second_came + timedelta(minutes=30)  # the first note's transcription took long
        stt.release()
        await asyncio.gather(first, second)
        rows = await env.rt.core.repos.messages.after(f"tg:{ADMIN}", 0)

    voice = [row for row in rows if row.role == "user"]
    assert [row.content for row in voice] == ["[voice] first note", "[voice] second note"]
    assert [row.create_time for row in voice] == [iso(first_came), iso(second_came)]


async def test_a_redelivered_voice_note_already_answered_is_not_transcribed_again(tmp_path: Path) -> None:
    async with FakeTranscription() as stt, chat(tmp_path, stt=stt) as env:
        env.llm.reply_text("Noted.")
        answered = await env.rt.router.handle(voice_message("buy milk", "601"))
        again = await env.rt.router.handle(voice_message("buy milk", "601"))  # the platform sends it again

    assert answered is not None and answered.text == "Noted."
    assert again is None
    assert len(stt.requests) == 1


# -- /memory why quotes only the person's own chats ----------------------------------------------


async def _extraction(env: Env, agent_id: int, conversation_id: str, line: str) -> None:
    """What a memory extraction of `conversation_id` does: a run, and the line it wrote."""
    runs, workspace = env.rt.core.repos.memory_runs, env.rt.core.workspace
    run_id = await runs.start(agent_id, "extraction", conversation_id)
    current, _ = await workspace.read_text(agent_id, MEMORY_FILE)
    await workspace.write(agent_id, MEMORY_FILE, f"{current.rstrip()}\n{line}\n", change="extraction",
                          run_id=run_id)
    await runs.finish(run_id, "completed")


async def test_memory_why_quotes_a_person_only_their_own_chats(tmp_path: Path) -> None:
    async with chat(tmp_path) as env:
        friend_agent = await _two_memories(env)
        env.llm.reply_text("Nice.")
        await say(env, "I love jasmine tea", user=FRIEND)
        await _extraction(env, friend_agent, f"tg:{FRIEND}", "- Loves jasmine tea.")
        # The owner talks with FRIEND's agent from the web page: not a chat FRIEND was in.
        env.llm.reply_text("I will keep it secret.")
        web = InboundMessage(channel="web", chat_id="owner-browser", sender_id="web", sender_name="web",
                             text="Plan a surprise party for them, do not tell", is_direct=True,
                             trigger_source="web")
        assert await env.rt.router.handle(web, agent_id=friend_agent) is not None
        web_chat = await env.rt.core.repos.conversations.active_for_chat("web:owner-browser")
        assert web_chat is not None and web_chat.agent_id == friend_agent
        await _extraction(env, friend_agent, web_chat.id, "- Has a party coming.")

        own = await say(env, "/memory why jasmine tea", user=FRIEND)
        other = await say(env, "/memory why party coming", user=FRIEND)

    assert "I love jasmine tea" in own
    assert "MEMORY.md" in other and "party coming" in other
    assert "surprise" not in other and PROMPTS.text("why_messages") not in other
