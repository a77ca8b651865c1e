"""Bad input through the router: nothing crashes, nothing stored is lost, what is stored is UTF-8 (SPEC S14)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.llm import AnthropicClient
from bot.core.prompts import PromptLibrary
from bot.conversation.router import MAX_MESSAGE_CHARS
from bot.app.runtime import Runtime, open_runtime
from channels.base import InboundMessage
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, untimed

REPLY = "fine, thanks"
EARLIER = ("first: café ☕ 日本語 — ok", "second line\twith a tab\nand a newline")
RTL_AND_EMOJI = "مرحبا بالعالم 👋🏽 שלום \u202eevil\u202c 👨\u200d👩\u200d👧 🇫🇷"
TELEGRAM = {"telegram": {"group-policy": "open", "require-mention": True}}


@dataclass(frozen=True)
class Case:
    """`answer`: None (ignored, nothing stored, no LLM call), "llm" (the model's reply), or a
    strings.yaml key the bot answers with; `stored`: the user text expected in mate_message."""

    text: str
    answer: str | None
    stored: str | None = None
    new_conversation: bool = False


CASES: dict[str, Case] = {
    "empty": Case("", None),
    "whitespace_only": Case(" \t\n  \r\n ", None),
    "one_megabyte": Case("x" * 1_048_576, "message_too_large"),
    "lone_surrogate": Case("\ud800abc", "llm", stored="\ufffdabc"),
    "surrogate_pair_halves": Case("ok \udc00\ud83d end", "llm", stored="ok \ufffd\ufffd end"),
    "nul_and_controls": Case("he\x00llo\x07 wor\x1bld\x7f\x0b!", "llm", stored="hello world!"),
    "rtl_and_emoji": Case(RTL_AND_EMOJI, "llm", stored=RTL_AND_EMOJI),
    "memory_junk_args": Case("/memory ☃ ../../etc", "memory_usage"),
    "new_with_junk": Case("/new extra junk", "new_conversation", new_conversation=True),
    # Text that starts with "/" but names no command is ordinary text for the model.
    "slash_only": Case("/", "llm", stored="/"),
    "unknown_command": Case("/unknowncmd", "llm", stored="/unknowncmd"),
    "a_path_question": Case("/etc/hosts is empty, why?", "llm", stored="/etc/hosts is empty, why?"),
    "controls_only": Case("\x00\x01\x02\x7f", None),
    "zero_width_only": Case("\u200b\u200c\u200d\u2060\ufeff", None),
}


def console(text: str) -> InboundMessage:
    return InboundMessage("console", "me", "me", "Me", text, trigger_source="console")


def telegram_group(text: str, sender: str = "Alice") -> InboundMessage:
    return InboundMessage("telegram", "-100", "id-alice", sender, text, is_direct=False,
                          mentions_bot=True, chat_title="Team")


CHANNELS: dict[str, tuple[Callable[[str], InboundMessage], Callable[[str], str]]] = {
    "console": (console, lambda text: text),
    "telegram_group": (telegram_group, lambda text: f"[Alice] {text}"),
}


@asynccontextmanager
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[Runtime, FakeAnthropic]]:
    async with FakeAnthropic() as fake:
        def respond(recorded: RecordedRequest) -> Script:
            return TextReply(REPLY)

        fake.responder = respond
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
                             channels=TELEGRAM)
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt:
            yield rt, fake


async def stored_rows(rt: Runtime) -> list[tuple[Any, ...]]:
    """Every message as raw bytes, so "intact" means byte-exact."""
    rows = await rt.core.db.fetchall(
        "SELECT id, conversation_id, role, CAST(content AS BLOB), sender_id, sender_name "
        "FROM mate_message ORDER BY id")
    return [tuple(r) for r in rows]


def text_blocks(body: dict[str, Any]) -> list[str]:
    out = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
        else:
            out += [b["text"] for b in content if b.get("type") == "text"]
    return out


@pytest.mark.parametrize("channel", list(CHANNELS))
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
async def test_bad_input_is_answered_or_ignored_and_history_survives(
    tmp_path: Path, channel: str, case: Case,
) -> None:
    make, label = CHANNELS[channel]
    async with runtime(tmp_path) as (rt, fake):
        for text in EARLIER:
            earlier = await rt.router.handle(make(text))
            assert earlier is not None and earlier.text == REPLY
        before = await stored_rows(rt)
        requests_before = len(fake.messages_requests())

        reply = await rt.router.handle(make(case.text))
        after = await stored_rows(rt)
        readable = [(m.role, m.content) for m in await rt.core.repos.messages.after(reply.conversation_id, 0)] \
            if reply is not None else []
        active = await rt.core.repos.conversations.active_for_chat(before[0][1])
        prompts: PromptLibrary = rt.core.prompts

    # what was stored before the bad input is still there, byte for byte
    assert after[: len(before)] == before
    assert [row[3].decode("utf-8") for row in before[0::2]] == [label(t) for t in EARLIER]
    new_rows = after[len(before):]
    for row in new_rows:  # whatever was stored for the bad input is valid UTF-8, and reads back the same
        row[3].decode("utf-8", errors="strict")
    new_requests = fake.messages_requests()[requests_before:]

    if case.answer is None:
        assert reply is None
        assert new_rows == [] and new_requests == []
        return
    assert reply is not None
    if case.answer == "llm":
        assert reply.text == REPLY
        assert case.stored is not None
        assert [(r[2], r[3].decode("utf-8")) for r in new_rows] == [("user", label(case.stored)), ("assistant", REPLY)]
        assert readable[-2:] == [("user", label(case.stored)), ("assistant", REPLY)]
        (request,) = new_requests
        sent = text_blocks(request)
        assert untimed(sent[-1]) == label(case.stored)
        # the real Messages API rejects empty or whitespace-only text blocks
        assert all(t.strip() for t in sent)
        json.dumps(request, ensure_ascii=False).encode("utf-8")
        return
    # a command or a refusal: answered without the model, nothing stored
    assert new_rows == [] and new_requests == []
    if case.answer == "message_too_large":
        assert reply.text == prompts.text("message_too_large", size=len(case.text.encode("utf-8")),
                                          limit=MAX_MESSAGE_CHARS)
    else:
        assert reply.text == prompts.text(case.answer)
    assert active is not None
    if case.new_conversation:  # the old conversation is archived whole; the chat goes on in `<key>#2`
        assert active.id == f"{before[0][1]}#2"
        assert [r[0] for r in after] == [r[0] for r in before]
    else:
        assert active.id == before[0][1]


async def test_surrogates_in_a_group_sender_name_are_stored_safely(tmp_path: Path) -> None:
    async with runtime(tmp_path) as (rt, fake):
        reply = await rt.router.handle(telegram_group("hello from a broken name", sender="\ud800Eve\x00"))
        rows = await stored_rows(rt)

    assert reply is not None and reply.text == REPLY
    for row in rows:
        for value in row[3:]:
            if isinstance(value, bytes):
                value.decode("utf-8", errors="strict")
            elif isinstance(value, str):
                value.encode("utf-8", errors="strict")
    assert untimed(text_blocks(fake.messages_requests()[-1])[-1]) == "[\ufffdEve] hello from a broken name"
