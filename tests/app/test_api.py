from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.core.config import Config
from bot.core.errors import ConfigError
from tests.support.api_env import Api, open_api
from tests.support.config import make_config


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in open_api(tmp_path):
        yield opened


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in open_api(tmp_path, token="s3cret-token"):
        yield opened


async def test_healthz(api: Api) -> None:
    assert await api.call("GET", "/healthz") == (
        200, {"code": 200, "data": {"status": "ok", "channels": {}}, "status": "ok"})


async def test_chat_round_trip_keeps_conversation(api: Api) -> None:
    api.fake.reply_text("Hello!")
    status, body = await api.call("POST", "/api/v1/chat/1", json={"message": "hi"})
    assert status == 200
    assert body["reply"] == body["data"]["reply"] == "Hello!"
    conversation_id = body["conversationId"]
    assert conversation_id.startswith("web:")
    api.fake.reply_text("Again")
    status, body = await api.call("POST", "/api/v1/chat/1", json={"message": "more", "conversationId": conversation_id})
    assert (status, body["conversationId"]) == (200, conversation_id)
    conversation = await api.rt.core.repos.conversations.get(conversation_id)
    assert conversation is not None and conversation.trigger_source == "web"
    last = api.fake.messages_requests()[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user"]


@pytest.mark.parametrize(
    ("body", "status"),
    [(b"{not json", 400), (b"[1, 2]", 400), (b'{"message": ""}', 400), (b'{"message": 5}', 400),
     (b'{"message": "x", "conversationId": 3}', 400)],
)
async def test_chat_bad_input_is_400(api: Api, body: bytes, status: int) -> None:
    code, answer = await api.call("POST", "/api/v1/chat/1", data=body,
                                  headers={"Content-Type": "application/json"})
    assert (code, answer["code"]) == (status, status)
    assert answer["msg"]
    assert api.fake.messages_requests() == []


async def test_unknown_agent_is_404(api: Api) -> None:
    for method, path in [("POST", "/api/v1/chat/77"), ("POST", "/api/v1/memory/77/emergence"),
                         ("GET", "/api/v1/memory/77/files"), ("GET", "/api/v1/memory/abc/files")]:
        status, body = await api.call(method, path, json={"message": "x"})
        assert (status, body["code"]) == (404, 404), path


async def test_files_list_and_read_with_slash(api: Api) -> None:
    await api.rt.core.workspace.write(1, "memory/2026-04-01.md", "# 2026-04-01\n\n- tea")
    status, body = await api.call("GET", "/api/v1/memory/1/files")
    assert status == 200
    data = body["data"]
    assert data["agentId"] == 1 and data["count"] == 5
    assert [f["filename"] for f in data["files"]][:4] == ["AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"]
    assert set(data["files"][0]) == {"filename", "enabled", "fileSize", "updateTime"}
    status, body = await api.call("GET", "/api/v1/memory/1/files/memory/2026-04-01.md")
    assert status == 200
    assert body["data"]["content"] == "# 2026-04-01\n\n- tea"
    assert body["data"]["enabled"] is False
    status, body = await api.call("GET", "/api/v1/memory/1/files/missing.md")
    assert (status, body["code"]) == (404, 404)


async def test_emergence_skipped_without_daily_notes(api: Api) -> None:
    status, body = await api.call("POST", "/api/v1/memory/1/emergence")
    assert status == 200
    assert body["code"] == 200 and body["data"]["status"] == "skipped"
    assert api.fake.messages_requests() == []


async def test_emergence_success_shape(api: Api) -> None:
    await api.rt.core.workspace.write(1, "memory/2026-04-01.md", "# 2026-04-01\n\n- likes tea")
    api.fake.reply_text('{"should_update": true, "reason": "tea is stable", "memory_content": "# Memory\\n- tea"}')
    status, body = await api.call("POST", "/api/v1/memory/1/emergence")
    assert (status, body) == (200, {"code": 200, "data": {"status": "completed", "updated": True,
                                                           "reason": "tea is stable"}})
    assert (await api.rt.core.workspace.get(1, "MEMORY.md")).content == "# Memory\n- tea"


async def test_emergence_failure_is_500_with_message(api: Api) -> None:
    await api.rt.core.workspace.write(1, "memory/2026-04-01.md", "- x")
    for _ in range(3):
        api.fake.reply_text("not json at all")
    status, body = await api.call("POST", "/api/v1/memory/1/emergence")
    assert status == 500
    assert body["code"] == 500 and body["msg"].startswith("Memory emergence failed: ")


async def test_summarize_unknown_conversation_is_404(api: Api) -> None:
    status, body = await api.call("POST", "/api/v1/memory/1/summarize/console:nobody")
    assert (status, body["code"]) == (404, 404)
    assert body["msg"] == "No such conversation for this agent: console:nobody"  # as the messages route says


async def test_summarize_runs_for_a_conversation(api: Api) -> None:
    api.fake.reply_text("Noted.")
    _, chat = await api.call("POST", "/api/v1/chat/1", json={"message": "remember: I am vegan and live in Lyon"})
    api.fake.reply_text('{"should_update": true, "reason": "diet", "daily_entry": "- vegan",'
                        ' "memory_update": "", "profile_update": "# Profile\\n- vegan"}')
    status, body = await api.call("POST", f"/api/v1/memory/1/summarize/{chat['conversationId']}")
    assert status == 200, body
    assert body["data"]["status"] == "completed"
    assert "vegan" in (await api.rt.core.workspace.get(1, "PROFILE.md")).content


async def test_token_required_when_configured(secured: Api) -> None:
    async with secured.http.get(secured.url + "/healthz") as response:  # open: health checks carry no token
        assert response.status == 200
    async with secured.http.get(secured.url + "/api/v1/memory/1/files") as response:
        assert response.status == 401
    async with secured.http.get(secured.url + "/api/v1/people") as response:  # who talks to the bot is private
        assert response.status == 401
    async with secured.http.post(secured.url + "/api/v1/chat/1", json={"message": "hi"},
                                 headers={"Authorization": "Bearer wrong"}) as response:
        assert response.status == 401
        assert "s3cret" not in await response.text()
    assert secured.fake.messages_requests() == []
    status, _ = await secured.call("GET", "/healthz")
    assert status == 200
    async with secured.http.get(secured.url + "/") as response:  # the page itself holds no data
        assert response.status == 200
        assert "<title>matebot</title>" in await response.text()


def test_non_loopback_without_token_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^mate\.api\.token: required"):
        make_config(tmp_path, api={"host": "0.0.0.0"})
    assert isinstance(make_config(tmp_path, api={"host": "0.0.0.0", "token": "t"}), Config)
