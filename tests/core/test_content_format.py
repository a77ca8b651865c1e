"""Stored content says what it is: a model reply that is JSON text stays text (SPEC S19)."""

from __future__ import annotations

from pathlib import Path

from bot.core.content.transcript import build_transcript
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.messages import blocks, plain
from tests.support.runtime import chat, running
from tests.support.window import CID

JSON_LOOKING_REPLY = '[{"type": "fruit", "name": "apple"}]'


async def test_a_json_looking_reply_is_replayed_as_text_after_a_restart(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        async with running(tmp_path, fake) as rt:
            fake.reply_text(JSON_LOOKING_REPLY)
            assert await chat(rt, "answer me in JSON please") == JSON_LOOKING_REPLY
        async with running(tmp_path, fake) as rt:  # a restart: the window comes from the database
            fake.reply_text("still fine")
            assert await chat(rt, "and now?") == "still fine"
            stored = await rt.core.repos.messages.after(CID, 0)
            transcript = build_transcript(stored, rt.core.prompts, 2000)
        replayed = fake.messages_requests()[-1]["messages"]

    assert [m.content_format for m in stored] == ["text"] * 4
    assistant = [m for m in replayed if m["role"] == "assistant"]
    assert [b for m in assistant for b in blocks(plain(m))] == [{"type": "text", "text": JSON_LOOKING_REPLY}]
    assert f"Assistant: {JSON_LOOKING_REPLY}" in transcript.splitlines()


async def test_a_tool_turn_is_stored_as_blocks_and_replayed_as_blocks(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        async with running(tmp_path, fake) as rt:
            fake.reply_tool_use("list_workspace_memory_files", {"agentId": 1}, text="Looking.")
            fake.reply_text("You have four files.")
            await chat(rt, "what files do you have?")
        async with running(tmp_path, fake) as rt:
            fake.reply_text("ok")
            await chat(rt, "thanks")
            stored = await rt.core.repos.messages.after(CID, 0)
        replayed = fake.messages_requests()[-1]["messages"]

    assert [(m.role, m.content_format) for m in stored] == [
        ("user", "text"), ("assistant", "blocks"), ("tool", "blocks"), ("assistant", "text"),
        ("user", "text"), ("assistant", "text")]
    kinds = [b["type"] for m in replayed for b in blocks(m)]
    assert kinds[:4] == ["text", "text", "tool_use", "tool_result"]
