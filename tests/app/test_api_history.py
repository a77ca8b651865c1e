"""Routes the web page needs: conversation list, history reload, versioned memory edits."""

from __future__ import annotations

from pathlib import Path

from tests.support.api_env import open_api


async def test_conversations_and_their_messages_reload(tmp_path: Path) -> None:
    async for api in open_api(tmp_path):
        api.fake.reply_text("First answer.")
        _, first = await api.call("POST", "/api/v1/chat/1", json={"message": "first question"})
        conversation = first["data"]["conversationId"]
        api.fake.reply_tool_use("list_workspace_memory_files", {})
        api.fake.reply_text("Second answer.")
        await api.call("POST", "/api/v1/chat/1", json={"message": "second", "conversationId": conversation})
        status, listed = await api.call("GET", "/api/v1/chat/1/conversations")
        _, history = await api.call("GET", f"/api/v1/chat/1/conversations/{conversation}/messages")
        _, later = await api.call("GET", f"/api/v1/chat/1/conversations/{conversation}/messages"
                                         f"?after={history['data']['messages'][1]['messageId']}")
        missing = await api.call("GET", "/api/v1/chat/1/conversations/web:nope/messages")
        bad_after = await api.call("GET", f"/api/v1/chat/1/conversations/{conversation}/messages?after=x")

    assert status == 200 and listed["data"]["conversations"][0]["conversationId"] == conversation
    assert listed["data"]["conversations"][0]["messageCount"] == 5  # the tool-call turn counts as stored
    messages = history["data"]["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "first question"), ("assistant", "First answer."), ("user", "second"),
        ("assistant", "Second answer.")]  # the tool turn is left out
    assert [m["content"] for m in later["data"]["messages"]] == ["second", "Second answer."]
    assert missing[0] == 404 and bad_after[0] == 400


async def test_a_memory_edit_names_the_version_it_read(tmp_path: Path) -> None:
    async for api in open_api(tmp_path):
        _, read = await api.call("GET", "/api/v1/memory/1/files/MEMORY.md")
        version = read["data"]["version"]
        ok = await api.call("PUT", "/api/v1/memory/1/files/MEMORY.md",
                            json={"content": "- likes tea\n", "version": version})
        stale = await api.call("PUT", "/api/v1/memory/1/files/MEMORY.md",
                               json={"content": "- overwritten?\n", "version": version})
        new = await api.call("PUT", "/api/v1/memory/1/files/notes/trip.md", json={"content": "Kyoto", "version": 0})
        again = await api.call("PUT", "/api/v1/memory/1/files/notes/trip.md", json={"content": "x", "version": 0})
        bad = [await api.call("PUT", "/api/v1/memory/1/files/MEMORY.md", json=body)
               for body in ({"content": "x"}, {"content": 1, "version": 1}, {"content": "x", "version": -1})]
        wrong_name = await api.call("PUT", "/api/v1/memory/1/files/..%2Fsecret.txt",
                                    json={"content": "x", "version": 0})
        _, after = await api.call("GET", "/api/v1/memory/1/files/MEMORY.md")

    assert ok[0] == 200 and ok[1]["data"]["version"] == version + 1 and not ok[1]["data"]["created"]
    assert stale[0] == 409 and stale[1]["data"]["version"] == version + 1
    assert after["data"]["content"] == "- likes tea\n"  # the stale edit overwrote nothing
    assert new[0] == 200 and new[1]["data"]["created"] and again[0] == 409
    assert [b[0] for b in bad] == [400, 400, 400] and wrong_name[0] in (400, 404)


async def test_reading_and_listing_files_answer_as_before_from_the_workspace(tmp_path: Path) -> None:
    async for api in open_api(tmp_path):
        await api.call("PUT", "/api/v1/memory/1/files/notes/trip.md", json={"content": "Kyoto", "version": 0})
        status, listed = await api.call("GET", "/api/v1/memory/1/files?prefix=notes/")
        _, read = await api.call("GET", "/api/v1/memory/1/files/notes/trip.md")
        missing = await api.call("GET", "/api/v1/memory/1/files/notes/none.md")
        outside = await api.call("GET", "/api/v1/memory/1/files/..%2Fsecret.md")
        not_markdown = await api.call("GET", "/api/v1/memory/1/files/notes.txt")
    assert status == 200 and [f["filename"] for f in listed["data"]["files"]] == ["notes/trip.md"]
    assert listed["data"]["count"] == 1 and set(listed["data"]["files"][0]) == {
        "filename", "enabled", "fileSize", "updateTime"}
    assert list(read["data"]) == ["agentId", "filename", "enabled", "fileSize", "content", "updateTime",
                                  "version", "fileId"]
    assert (read["data"]["content"], read["data"]["version"]) == ("Kyoto", 1)
    assert [missing[0], outside[0], not_markdown[0]] == [404, 404, 404]
    assert "notes/none.md" in missing[1]["msg"]
