"""The web page's API (SPEC S33): a save names the file it was opened at, and chats and agents carry names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.core.errors import VersionConflict
from tests.support.api_env import Api, TWO_AGENTS, open_api


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in open_api(tmp_path, **TWO_AGENTS):
        yield opened


async def _opened(api: Api, agent_id: int, filename: str) -> dict[str, Any]:
    status, body = await api.call("GET", f"/api/v1/memory/{agent_id}/files/{filename}")
    assert status == 200, body
    return dict(body["data"])


async def test_a_read_names_the_agent_and_the_file_it_came_from(api: Api) -> None:
    owner, friend = await _opened(api, 1, "SOUL.md"), await _opened(api, 2, "SOUL.md")
    assert (owner["agentId"], friend["agentId"]) == (1, 2)
    assert isinstance(owner["fileId"], int) and isinstance(friend["fileId"], int)
    assert owner["fileId"] != friend["fileId"]


@pytest.mark.parametrize("names", [("agentId", "fileId"), ("agentId",), ("fileId",)])
async def test_a_save_opened_on_one_agent_never_lands_in_another(api: Api, names: tuple[str, ...]) -> None:
    friend_before, _ = await api.rt.core.workspace.read_text(2, "SOUL.md")
    opened = await _opened(api, 1, "SOUL.md")
    # Both files are at their first version: the version alone cannot tell them apart.
    assert opened["version"] == (await _opened(api, 2, "SOUL.md"))["version"]
    body = {"content": "the owner's own soul", "version": opened["version"], **{n: opened[n] for n in names}}
    status, answer = await api.call("PUT", "/api/v1/memory/2/files/SOUL.md", json=body)
    assert status == 409, answer
    assert "reload" in answer["msg"].lower()
    assert answer["data"]["agentId"] == 2 and answer["data"]["filename"] == "SOUL.md"
    assert (await api.rt.core.workspace.read_text(2, "SOUL.md"))[0] == friend_before
    assert (await api.rt.core.workspace.read_text(1, "SOUL.md"))[0] == opened["content"]


async def test_a_save_of_the_file_opened_is_written_and_says_its_new_version(api: Api) -> None:
    opened = await _opened(api, 2, "SOUL.md")
    body = {"content": "calm and kind", "version": opened["version"], "agentId": 2, "fileId": opened["fileId"]}
    status, answer = await api.call("PUT", "/api/v1/memory/2/files/SOUL.md", json=body)
    assert status == 200, answer
    assert answer["data"]["version"] == opened["version"] + 1
    assert (await api.rt.core.workspace.read_text(2, "SOUL.md"))[0] == "calm and kind"
    # the editor saves again from what it now shows
    body = {"content": "calm", "version": answer["data"]["version"], "agentId": 2, "fileId": opened["fileId"]}
    assert (await api.call("PUT", "/api/v1/memory/2/files/SOUL.md", json=body))[0] == 200


async def test_a_stale_editor_is_refused_with_reload(api: Api) -> None:
    opened = await _opened(api, 1, "MEMORY.md")
    await api.rt.core.workspace.write(1, "MEMORY.md", "- written by the extraction\n",
                                      expected_version=opened["version"])
    body = {"content": "- my stale edit\n", "version": opened["version"], "agentId": 1, "fileId": opened["fileId"]}
    status, answer = await api.call("PUT", "/api/v1/memory/1/files/MEMORY.md", json=body)
    assert status == 409 and "reload" in answer["msg"].lower()
    assert (await api.rt.core.workspace.read_text(1, "MEMORY.md"))[0] == "- written by the extraction\n"


@pytest.mark.parametrize("field", [{"agentId": "1"}, {"fileId": True}, {"fileId": -3}])
async def test_a_malformed_opened_at_field_is_a_bad_request(api: Api, field: dict[str, Any]) -> None:
    opened = await _opened(api, 1, "SOUL.md")
    body = {"content": "x", "version": opened["version"], **field}
    status, _ = await api.call("PUT", "/api/v1/memory/1/files/SOUL.md", json=body)
    assert status == 400
    assert (await api.rt.core.workspace.read_text(1, "SOUL.md"))[0] == opened["content"]


async def _conversation(api: Api, conversation_id: str, channel: str, *, title: str | None = None,
                        group: bool = False, sender: str | None = None, text: str = "hello") -> None:
    repos = api.rt.core.repos
    await repos.conversations.create(conversation_id, agent_id=1, channel=channel, chat_key=conversation_id,
                                     trigger_source=channel, title=title, is_group=group)
    await repos.messages.add_user(conversation_id, text, 2, sender_id=sender, sender_name="alice_tg")


async def test_conversations_carry_a_display_name_beside_their_ids(api: Api) -> None:
    await _conversation(api, "tg:111", "telegram", sender="111")
    await _conversation(api, "tg:-100555", "telegram", title="Family", group=True, sender="111")
    await _conversation(api, "tg:999", "telegram", sender="999")
    await _conversation(api, "tg:444", "telegram", sender="444")  # met before any person was made
    await _conversation(api, "console:local", "console", sender="local")
    await _conversation(api, "web:abc", "web", sender="web",
                        text="What should I cook tonight with the leftover rice and two eggs?")
    status, body = await api.call("GET", "/api/v1/chat/1/conversations")
    assert status == 200
    names = {c["conversationId"]: c["displayName"] for c in body["data"]["conversations"]}
    assert names == {
        "tg:111": "Alice (Telegram)",
        "tg:-100555": "Group: Family (Telegram)",
        "tg:999": "Owner (Telegram)",
        "tg:444": "alice_tg (Telegram)",
        "console:local": "console",
        "web:abc": "Web chat: “What should I cook tonight with the left…”",
    }
    first = body["data"]["conversations"][0]
    assert {"conversationId", "channel", "title", "archived", "messageCount", "lastActivity"} <= set(first)


async def test_agents_are_listed_with_a_display_name(api: Api) -> None:
    alice = next(p for p in await api.rt.core.people.list() if p.name == "Alice")
    own = await api.rt.core.agents.for_person(alice.id)
    group = await api.rt.core.agents.for_chat("tg:-100555", "Family")
    status, body = await api.call("GET", "/api/v1/agents")
    assert status == 200, body
    listed = {a["agentId"]: a for a in body["data"]["agents"]}
    assert {i: a["displayName"] for i, a in listed.items()} == {
        1: "Mate", 2: "Buddy", own: "Mate for Alice", group: "Group: Family (Telegram)"}
    assert listed[own]["name"] == "Mate" and listed[own]["personId"] == alice.id
    assert body["data"]["count"] == 4


async def test_a_write_for_a_removed_file_never_lands_in_one_recreated_at_its_version(api: Api) -> None:
    workspace = api.rt.core.workspace
    first = (await workspace.write(2, "NOTES.md", "the first notes\n", expected_version=0)).file
    await workspace.delete(2, "NOTES.md")
    again = (await workspace.write(2, "NOTES.md", "notes written again\n", expected_version=0)).file
    assert (again.id, again.version) != (first.id, first.version) and again.version == first.version
    with pytest.raises(VersionConflict):
        await workspace.write(2, "NOTES.md", "an edit of the first notes\n", expected_version=first.version,
                              expected_file_id=first.id)
    kept = await workspace.get(2, "NOTES.md")
    assert kept is not None and (kept.id, kept.content, kept.version) == (again.id, "notes written again\n", 1)
    # the file that is there, named by its own id, is written as usual
    written = await workspace.write(2, "NOTES.md", "an edit\n", expected_version=1, expected_file_id=again.id)
    assert (written.file.id, written.file.version) == (again.id, 2)


async def test_a_write_naming_a_file_id_does_not_create_a_missing_file(api: Api) -> None:
    workspace = api.rt.core.workspace
    gone = (await workspace.write(2, "NOTES.md", "notes\n", expected_version=0)).file
    await workspace.delete(2, "NOTES.md")
    with pytest.raises(VersionConflict):
        await workspace.write(2, "NOTES.md", "an edit\n", expected_version=0, expected_file_id=gone.id)
    assert await workspace.get(2, "NOTES.md") is None
