"""The user's message is stored before the model is asked, in an active chat too: a message
that cannot be stored costs no model call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.api_env import Api, open_api


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in open_api(tmp_path):
        yield opened


@pytest.mark.parametrize("pragma", ["PRAGMA query_only = ON", "PRAGMA max_page_count = 1"])
async def test_a_message_that_cannot_be_stored_is_never_sent_to_the_model(api: Api, pragma: str) -> None:
    api.fake.reply_text("first")
    status, _ = await api.call("POST", "/api/v1/chat/1", json={"message": "hello", "conversationId": "c"})
    assert status == 200  # the chat is active now: its window is cached
    assert await api.rt.router.drain(30)  # the first turn's memory event is written too
    asked = len(api.fake.messages_requests())
    await api.rt.core.db.writer.execute(pragma)  # a read-only file; a full disk (no page can be added)
    api.fake.reply_text("an answer nobody could keep")
    status, body = await api.call("POST", "/api/v1/chat/1", json={"message": "hello there " * 20_000,
                                                                  "conversationId": "c"})
    assert (status, body["code"], body["msg"]) == (503, 503, api.rt.core.prompts.text("storage_error"))
    assert len(api.fake.messages_requests()) == asked
