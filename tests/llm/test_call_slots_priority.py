"""mate.llm.slots: the model's slots are shared, and a waiting chat call is served before memory work."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.core.config import LlmConfig, load_config, parse_config
from bot.core.errors import LLMBusy
from bot.llm import AnthropicClient, LLMRequest
from bot.llm.slots import CallSlots
from tests.support.eventually import eventually
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply


async def _call(slots: CallSlots, name: str, *, chat: bool, ran: list[str], hold: asyncio.Event | None = None) -> None:
    async with slots.held(chat):
        ran.append(name)
        if hold is not None:
            await hold.wait()


async def test_a_chat_call_arriving_after_a_waiting_memory_call_gets_the_slot_first() -> None:
    slots = CallSlots(1, timeout=60)
    ran: list[str] = []
    release = asyncio.Event()
    first = asyncio.create_task(_call(slots, "chat 1", chat=True, ran=ran, hold=release))
    await eventually(lambda: ran == ["chat 1"], "the first chat call to hold the only slot")
    memory = asyncio.create_task(_call(slots, "memory", chat=False, ran=ran))
    await eventually(lambda: slots.memory_waiting == 1, "the memory call to wait")
    chat = asyncio.create_task(_call(slots, "chat 2", chat=True, ran=ran))
    await eventually(lambda: slots.chat_waiting == 1, "the second chat call to wait")
    release.set()
    await asyncio.gather(first, memory, chat)
    assert ran == ["chat 1", "chat 2", "memory"]


async def test_a_running_memory_call_is_not_interrupted_and_chat_goes_next() -> None:
    slots = CallSlots(1, timeout=60)
    ran: list[str] = []
    release = asyncio.Event()
    running = asyncio.create_task(_call(slots, "memory 1", chat=False, ran=ran, hold=release))
    await eventually(lambda: ran == ["memory 1"], "the memory call to hold the only slot")
    queued = asyncio.create_task(_call(slots, "memory 2", chat=False, ran=ran))
    await eventually(lambda: slots.memory_waiting == 1, "the second memory call to wait")
    chat = [asyncio.create_task(_call(slots, f"chat {i}", chat=True, ran=ran)) for i in (1, 2)]
    await eventually(lambda: slots.chat_waiting == 2, "both chat calls to wait")
    assert ran == ["memory 1"]
    release.set()
    await asyncio.gather(running, queued, *chat)
    assert ran == ["memory 1", "chat 1", "chat 2", "memory 2"]  # chat in arrival order, then memory


async def test_a_chat_call_that_gave_up_waiting_leaves_the_slot_to_memory_work() -> None:
    slots = CallSlots(1, timeout=0.05)
    ran: list[str] = []
    release = asyncio.Event()
    holder = asyncio.create_task(_call(slots, "memory 1", chat=False, ran=ran, hold=release))
    await eventually(lambda: ran == ["memory 1"], "the memory call to hold the only slot")
    queued = asyncio.create_task(_call(slots, "memory 2", chat=False, ran=ran))
    await eventually(lambda: slots.memory_waiting == 1, "the second memory call to wait")
    with pytest.raises(LLMBusy):  # bounded: the busy apology after timeout-seconds, as before
        await _call(slots, "chat", chat=True, ran=ran)
    assert slots.chat_waiting == 0
    release.set()
    await asyncio.gather(holder, queued)
    assert ran == ["memory 1", "memory 2"]
    await _call(slots, "chat again", chat=True, ran=ran)  # the slot came back: nothing leaked
    assert ran[-1] == "chat again"


async def test_memory_work_does_not_take_a_free_slot_while_chat_waits_for_one() -> None:
    slots = CallSlots(2, timeout=60)
    ran: list[str] = []
    release = [asyncio.Event(), asyncio.Event()]
    holders = [asyncio.create_task(_call(slots, f"chat {i}", chat=True, ran=ran, hold=release[i])) for i in (0, 1)]
    await eventually(lambda: len(ran) == 2, "two chat calls to hold both slots")
    chat = asyncio.create_task(_call(slots, "chat 3", chat=True, ran=ran, hold=release[0]))
    memory = asyncio.create_task(_call(slots, "memory", chat=False, ran=ran))
    await eventually(lambda: (slots.chat_waiting, slots.memory_waiting) == (1, 1), "both to wait")
    release[1].set()  # one slot frees: the waiting chat call takes it, memory still waits
    await eventually(lambda: "chat 3" in ran, "the waiting chat call to run")
    assert "memory" not in ran and slots.memory_waiting == 1
    release[0].set()
    await asyncio.gather(*holders, chat, memory)
    assert ran[-1] == "memory"


def test_slots_bound_the_calls_in_flight_and_default_to_max_concurrency() -> None:
    assert (LlmConfig().slots, LlmConfig().call_slots) == (None, 32)
    assert LlmConfig(slots=1).call_slots == 1
    assert LlmConfig(slots=64, max_concurrency=4).call_slots == 4  # the smaller limit holds
    from_file = parse_config({"mate": {"llm": {"slots": "2"}}}, environ={})  # as ${ENV} substitution gives it
    assert from_file.mate.llm.call_slots == 2
    with pytest.raises(Exception, match="slots"):
        parse_config({"mate": {"llm": {"slots": 0}}}, environ={})


def test_config_yaml_documents_slots() -> None:
    shipped = Path(__file__).resolve().parents[2] / "config.yaml"
    lines = shipped.read_text(encoding="utf-8").splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.strip().startswith("slots:")]
    comment = " ".join(line.split("#", 1)[1] for line in lines[at:at + 2])  # the key's line and the next
    assert "chat" in comment and "memory" in comment and "max-concurrency" in comment
    assert load_config(shipped, environ={}).mate.llm.slots is None


async def test_with_one_slot_the_client_sends_a_waiting_chat_request_before_a_waiting_extraction() -> None:
    release = asyncio.Event()

    def respond(recorded: RecordedRequest) -> Script | None:
        text = recorded.body["messages"][0]["content"]
        return TextReply(f"answer to {text}", hold=release.wait if text == "first chat" else None)

    def request(text: str, purpose: str) -> LLMRequest:
        return LLMRequest(model="m", system="s", messages=[{"role": "user", "content": text}], max_tokens=20,
                          purpose=purpose)

    async with FakeAnthropic() as fake:
        fake.responder = respond
        config = LlmConfig(api_key="k", base_url=fake.url, max_retries=0, stream=False, slots=1)
        async with AnthropicClient(config) as llm:
            first = asyncio.create_task(llm.complete(request("first chat", "chat")))
            await eventually(lambda: len(fake.requests) == 1, "the first chat request to reach the model")
            memory = asyncio.create_task(llm.complete(request("extraction", "memory")))
            await eventually(lambda: llm.slots.memory_waiting == 1, "the extraction to wait for the slot")
            chat = asyncio.create_task(llm.complete(request("second chat", "chat")))
            await eventually(lambda: llm.slots.chat_waiting == 1, "the second chat to wait for the slot")
            assert len(fake.requests) == 1  # one slot: both wait for it
            release.set()
            answers = await asyncio.gather(first, memory, chat)
    assert [r.body["messages"][0]["content"] for r in fake.requests] == ["first chat", "second chat", "extraction"]
    assert [a.text for a in answers] == ["answer to first chat", "answer to extraction", "answer to second chat"]
