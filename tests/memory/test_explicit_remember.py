"""An explicit "remember ..." is kept by the memory worker even when a small model keeps nothing
(SPEC S34): the request is named in the extraction prompt, and an answer that changes no
long-term file gets the person's own words added to MEMORY.md. Through the real SDK on the fake
Messages API, with real SQLite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.group_chat import GROUP, group_chat
from tests.support.memory_env import CONVERSATION, add_messages, memory_env, memory_reply

ASK = "Please remember this and write it into your MEMORY.md memory file: my sister Mia's birthday is on 14 March."
WHAT = "my sister Mia's birthday is on 14 March."


def nothing_kept(reason: str = "conversation was short") -> str:
    return memory_reply(should_update=False, reason=reason)


def user_text(request: dict[str, Any]) -> str:
    content = request["messages"][0]["content"]
    return content if isinstance(content, str) else "".join(block.get("text", "") for block in content)


async def test_a_request_the_model_keeps_nothing_of_is_added_to_memory_in_the_persons_words(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, [("user", "hello there, how are you"), ("assistant", "fine"),
                                      ("user", ASK), ("assistant", "I'll remember that.")])
        env.fake.reply_text(nothing_kept())
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        (request,) = env.fake.messages_requests()
    assert "## Asked to remember" in user_text(request) and WHAT in user_text(request)
    assert outcome.status == "completed" and outcome.files == ("MEMORY.md",)
    assert f"- {WHAT} (" in memory
    assert "_Nothing" not in memory  # the seed's placeholder line gave way to the first fact


async def test_what_the_model_kept_itself_is_not_added_again(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, [("user", ASK), ("assistant", "Saved.")])
        env.fake.reply_text(json.dumps({"should_update": True, "reason": "asked", "daily_entry": "",
                                        "memory_edits": [{"append": "- Mia (sister): birthday 14 March"}]}))
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
    assert "- Mia (sister): birthday 14 March" in memory
    assert WHAT not in memory


@pytest.mark.parametrize("said", ["Do you remember where I live?", "I remember our trip to Rome, it rained all week",
                                  "你还记得我住在哪儿吗？", "Please remember my bank password: hunter2hunter2",
                                  "remember this key sk4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4", "记住：我的银行卡密码是 123456"])
async def test_a_question_a_memory_of_ones_own_or_a_secret_is_no_request_to_keep(tmp_path: Path, said: str) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, [("user", said), ("assistant", "Not yet.")])
        env.fake.reply_text(nothing_kept())
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        (request,) = env.fake.messages_requests()
    assert "Asked to remember" not in user_text(request)
    assert outcome.files == () and said not in memory


async def test_a_request_that_does_not_fit_memorys_budget_goes_to_the_daily_note(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"memory-max-chars": 60}) as env:
        await add_messages(env.core, [("user", ASK), ("assistant", "ok")])
        env.fake.reply_text(nothing_kept())
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        daily = [name for name in outcome.files if name.startswith("memory/")]
        note, _ = await env.core.workspace.read_text(1, daily[0]) if daily else ("", 0)
    assert outcome.status == "completed" and daily and "MEMORY.md" not in outcome.files
    assert WHAT not in memory and WHAT in note


@pytest.mark.parametrize("said", ["Remember, I'm vegetarian", "don't forget: I'm vegetarian",
                                  "记住：我吃素", "Keep in mind that I'm vegetarian"])
async def test_each_way_of_asking_is_kept(tmp_path: Path, said: str) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, [("user", said), ("assistant", "ok")])
        env.fake.reply_text(nothing_kept())
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
    assert ("vegetarian" if "素" not in said else "我吃素") in memory


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
async def test_in_a_group_the_request_is_kept_with_who_asked(tmp_path: Path, locale: str) -> None:
    asked = "记住：周六的聚会改到七点。" if locale == "zh-CN" else "remember: the party moved to Saturday at 7"
    what = asked.split("：" if locale == "zh-CN" else ": ", 1)[1]
    async with memory_env(tmp_path, locale=locale) as env:
        await group_chat(env.core, 1, [("111", "Alice", "hi everyone"), ("222", "Bob", asked)])
        env.fake.reply_text(json.dumps({"should_update": False, "reason": "small talk", "daily_entry": "",
                                        "memory_update": ""}))
        outcome = await env.service.analyze_and_update_memory(1, GROUP)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        (request,) = env.fake.messages_requests()
    assert f"- Bob: {what}" in user_text(request).split("</transcript>", 1)[1]
    assert outcome.files == ("MEMORY.md",) and f"- Bob: {what} (" in memory
