"""Messages made only of combining marks are blank: ignored by the router, 400 from the web API, no model call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.core.text import is_blank
from channels.base import InboundMessage
from tests.support.api_env import Api, open_api

# Combining acute accents, an enclosing keycap alone, Thai and Hebrew vowel marks, a combining
# grapheme joiner, and marks between zero-width joiners: nothing a person could read.
MARKS_ONLY = ["\u0301\u0301", "\u20e3", "\u0e31\u0e34", "\u05b7 \u05b8", "\u034f", "\u200d\u0301\u200d\u0308"]
# Marks on a base character are text: these must still reach the model.
READABLE = ["e\u0301", "#\u20e3", "\u0e01\u0e31", "\U0001f468\u200d\U0001f469"]


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in open_api(tmp_path):
        yield opened


@pytest.mark.parametrize("text", MARKS_ONLY)
async def test_a_message_of_combining_marks_only_is_ignored_like_a_blank_one(api: Api, text: str) -> None:
    reply = await api.rt.router.handle(InboundMessage("console", "me", "me", "me", text))
    status, body = await api.call("POST", "/api/v1/chat/1", json={"message": text})
    assert reply is None
    assert status == 400 and "non-empty" in body["msg"]
    assert api.fake.messages_requests() == []
    assert await api.rt.core.repos.conversations.count() == 0


@pytest.mark.parametrize("text", READABLE)
async def test_marks_on_a_base_character_are_a_message(api: Api, text: str) -> None:
    api.fake.reply_text("seen")
    reply = await api.rt.router.handle(InboundMessage("console", "me", "me", "me", text))
    assert reply is not None and reply.text == "seen"
    (request,) = api.fake.messages_requests()
    assert text in str(request["messages"][-1]["content"])


@pytest.mark.parametrize("text", ["", " \t\n", "\x00\x7f", "\u200b\ufeff", "\u3164", "\ufdd0\uffff", *MARKS_ONLY])
def test_is_blank_sees_nothing_readable(text: str) -> None:
    assert is_blank(text)


# Emoji newer than this Python's Unicode tables (shaking face, pink heart) are unassigned here.
@pytest.mark.parametrize("text", ["a", "\u0903", "\U0001fae8", "\U0001fa77", *READABLE])
def test_is_blank_keeps_readable_text(text: str) -> None:
    assert not is_blank(text)
