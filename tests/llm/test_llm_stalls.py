"""Model streams that stall or never end: they give up their concurrency slot, and a message
that finds every slot taken gets the busy apology instead of waiting (real SDK, fake API)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.app.api.server import ApiServer
from bot.core.errors import LLMBusy
from bot.llm import AnthropicClient
from bot.app.runtime import Runtime, open_runtime
from channels.base import InboundMessage
from tests.support.eventually import eventually
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, StalledReply, TextReply, untimed
from tests.support.recording import Recorder

TIMEOUT = 1.0  # timeout-seconds in these tests
LIMIT = 30.0  # the most any wait here may take; before the fix these waited up to 600 s
BEAT = 0.05  # how often a stuck stream sends a ping (or a word), far inside TIMEOUT


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@asynccontextmanager
async def running(tmp_path: Path, fake: FakeAnthropic, **llm: Any) -> AsyncIterator[Runtime]:
    options = {"api-key": "k", "base-url": fake.url, "max-retries": 0, "timeout-seconds": TIMEOUT, **llm}
    config = make_config(tmp_path, llm=options, api={"port": 0, "token": ""})
    async with AnthropicClient(config.mate.llm) as client, open_runtime(
            config, llm=client, with_memory_worker=False) as rt:
        yield rt


def said(recorded: RecordedRequest) -> str:
    content = recorded.body["messages"][-1]["content"]
    texts = [content] if isinstance(content, str) else [b["text"] for b in content if b.get("type") == "text"]
    return untimed(texts[-1]) if texts else ""


def stuck_when_asked(stall: StalledReply) -> Callable[[RecordedRequest], Script]:
    """`stall` for messages that say "stuck", a plain answer for the rest."""
    return lambda recorded: stall if said(recorded).startswith("stuck") else TextReply("ok")


async def ask(rt: Runtime, who: str, text: str, recorder: Recorder | None = None) -> Any:
    reply = await rt.router.handle(InboundMessage("console", who, who, who, text), stream=recorder or Recorder())
    assert reply is not None
    return reply


async def user_messages(rt: Runtime) -> list[str]:
    rows = await rt.core.db.fetchall("SELECT content FROM mate_message WHERE role = 'user' ORDER BY id")
    return [row[0] for row in rows]


# -- the gap between stream events ------------------------------------------------------------


async def test_a_stream_that_only_pings_is_given_up_after_timeout_seconds(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    # Pings restart the SDK's read timeout, so only the gap between real events can end this.
    fake.responder = stuck_when_asked(StalledReply(beat_every=BEAT))
    async with running(tmp_path, fake, **{"max-retries": 1}) as rt:
        began = time.monotonic()
        async with asyncio.timeout(LIMIT):
            reply = await ask(rt, "me", "stuck: tell me everything")
        took = time.monotonic() - began
        await eventually(lambda: fake.stalled_open == 0, "the client to hang up on the stuck streams")
        stored = await user_messages(rt)

    assert (reply.failure, reply.text) == ("llm", rt.core.prompts.text("llm_error"))
    assert len(fake.messages_requests()) == 2  # retried once, as any timeout is, then the apology
    assert took >= 2 * TIMEOUT  # each try waited out the silence, no less
    assert stored == ["stuck: tell me everything"]  # the message is kept, as with any model failure


async def test_a_stream_that_stalls_after_some_text_keeps_the_text_and_says_it_broke_off(
    tmp_path: Path, fake: FakeAnthropic,
) -> None:
    fake.responder = stuck_when_asked(StalledReply(text="The first half of an answer", beat_every=BEAT))
    recorder = Recorder()
    async with running(tmp_path, fake, **{"max-retries": 1}) as rt:
        async with asyncio.timeout(LIMIT):
            reply = await ask(rt, "me", "stuck: a long story, please", recorder)
        rows = await rt.core.db.fetchall("SELECT role, content FROM mate_message ORDER BY id")

    assert reply.failure == "llm"
    assert reply.text == f"The first half of an answer\n\n{rt.core.prompts.text('stream_broken')}"
    assert recorder.events == [("text", "The first half of an answer")]
    assert len(fake.messages_requests()) == 1  # the user saw part of it: a second answer would not follow on
    assert [tuple(r) for r in rows] == [("user", "stuck: a long story, please"),
                                        ("assistant", "The first half of an answer")]


async def test_two_stuck_streams_no_longer_keep_a_new_message_waiting(tmp_path: Path, fake: FakeAnthropic) -> None:
    fake.responder = stuck_when_asked(StalledReply(beat_every=BEAT))
    async with running(tmp_path, fake, **{"max-concurrency": 2}) as rt:
        stuck = [asyncio.create_task(ask(rt, who, f"stuck: question from {who}")) for who in ("ann", "bob")]
        await eventually(lambda: fake.stalled_open == 2, "both slots to be taken by stuck streams")
        began = time.monotonic()
        async with asyncio.timeout(LIMIT):
            third = await ask(rt, "cat", "hello")
            took = time.monotonic() - began
            first, second = await asyncio.gather(*stuck)

    # Served as soon as a stuck stream gave its slot up, or told at once that it is busy: which
    # one depends on whether the stuck answer's cancellation beat the wait for a slot by a hair.
    assert third.text in ("ok", rt.core.prompts.text("llm_busy"))
    assert took < 2 * TIMEOUT + LIMIT / 3  # about timeout-seconds; before the fix, up to 600 s
    for reply in (first, second):
        assert (reply.failure, reply.text) == ("llm", rt.core.prompts.text("llm_error"))


# -- the wait for a concurrency slot ----------------------------------------------------------


async def stream_chat(http: aiohttp.ClientSession, url: str, text: str, started: asyncio.Event) -> dict[str, Any]:
    """POST to the web chat's streaming route; `started` is set at the first piece of text."""
    done: dict[str, Any] = {}
    async with http.post(f"{url}/api/v1/chat/1/stream", json={"message": text}) as response:
        event = ""
        async for raw in response.content:
            line = raw.decode().strip()
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                started.set()
                if event == "done":
                    done = json.loads(line.removeprefix("data: "))
    return done


async def test_a_message_that_finds_every_slot_taken_gets_the_busy_apology(tmp_path: Path, fake: FakeAnthropic) -> None:
    # Answers that keep coming word by word, for ever: alive, so only the wait for a slot is bounded.
    release = asyncio.Event()
    fake.responder = stuck_when_asked(StalledReply(text="Once", beat_every=BEAT, beat_text=" more", release=release))
    async with running(tmp_path, fake, **{"max-concurrency": 2}) as rt, \
            ApiServer(rt, rt.core.config.mate.api) as server, aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{server.port}"
        started = [asyncio.Event(), asyncio.Event()]
        endless = [asyncio.create_task(stream_chat(http, url, f"stuck: story {n}", started[n])) for n in (0, 1)]
        try:
            await eventually(lambda: all(e.is_set() for e in started), "both endless answers to be streaming")
            began = time.monotonic()
            async with asyncio.timeout(LIMIT):
                async with http.post(f"{url}/api/v1/chat/1", json={"message": "hello"}) as response:
                    status, body = response.status, await response.json()
            took = time.monotonic() - began
            assert fake.stalled_open == 2  # the endless answers still held both slots all along
        finally:
            release.set()
        async with asyncio.timeout(LIMIT):
            finished = await asyncio.gather(*endless)
            async with http.post(f"{url}/api/v1/chat/1", json={"message": "and now?"}) as response:
                after = response.status, await response.json()
        stored = await user_messages(rt)

    assert (status, body["msg"]) == (503, rt.core.prompts.text("llm_busy"))
    assert TIMEOUT <= took < TIMEOUT + LIMIT / 3  # it waited timeout-seconds for a slot, not for the others
    asked = sorted(said(r) for r in fake.requests if r.path == "/v1/messages")
    assert asked == ["and now?", "stuck: story 0", "stuck: story 1"]  # "hello" never reached the model
    assert "hello" in stored  # nothing lost: the message is kept, as with any model failure
    for done in finished:  # the endless answers were not disturbed: they end when the model ends them
        assert "failure" not in done and done["reply"].startswith("Once more")
    assert (after[0], after[1]["reply"]) == (200, "ok")  # the wait that gave up took no slot with it


async def test_memory_work_waits_for_a_slot_instead_of_failing(tmp_path: Path, fake: FakeAnthropic) -> None:
    # Nobody waits for an extraction: it must not fail (and count a failed attempt) only
    # because chat answers held every slot for longer than timeout-seconds.
    from bot.llm import LLMRequest

    release = asyncio.Event()
    fake.responder = stuck_when_asked(StalledReply(text="Once", beat_every=BEAT, beat_text=" more", release=release))
    async with running(tmp_path, fake, **{"max-concurrency": 1}) as rt:
        busy = asyncio.create_task(ask(rt, "a", "stuck: a long story"))
        await eventually(lambda: fake.stalled_open == 1, "the endless answer to hold the only slot")
        memory = asyncio.create_task(rt.llm.complete(LLMRequest(
            model="m", system="s", messages=[{"role": "user", "content": "extract"}], max_tokens=50,
            purpose="memory")))
        chat = asyncio.create_task(rt.llm.complete(LLMRequest(
            model="m", system="s", messages=[{"role": "user", "content": "hello"}], max_tokens=50)))
        await eventually(chat.done, "the chat request to give up")
        began = time.monotonic()
        await eventually(lambda: time.monotonic() - began > TIMEOUT * 1.5, "past timeout-seconds once more")
        assert not memory.done()  # still waiting, well past timeout-seconds
        release.set()
        async with asyncio.timeout(LIMIT):
            answer = await memory
            await busy

    assert isinstance(chat.exception(), LLMBusy)
    assert answer.text == "ok"
