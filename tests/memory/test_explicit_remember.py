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
                                  "remember this key sk4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4", "记住：我的银行卡密码是 123456",
                                  "remember my PIN 4821", "记住：我的银行卡是6222 0212 3456 7890",
                                  "Remember when we went to Rome? That was fun", "Note that this code fails on Windows. fix it",
                                  "Can you write down the steps for baking bread"])
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
                                  "记住：我吃素", "Keep in mind that I'm vegetarian", "Can you remember that I'm vegetarian?",
                                  "Pls remember I'm vegetarian", "I want you to remember that I'm vegetarian",
                                  "你能记住我吃素吗？"])
async def test_each_way_of_asking_is_kept(tmp_path: Path, said: str) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, [("user", said), ("assistant", "ok")])
        env.fake.reply_text(nothing_kept())
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
    assert ("vegetarian" if "素" not in said else "我吃素") in memory


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
async def test_in_a_group_the_request_goes_to_the_days_note_with_who_asked(tmp_path: Path, locale: str) -> None:
    """A member's words reach the group's MEMORY.md (and every reply) only through the model."""
    asked = "记住：周六的聚会改到七点。" if locale == "zh-CN" else "remember: the party moved to Saturday at 7"
    what = "周六的聚会改到七点" if locale == "zh-CN" else "the party moved to Saturday at 7"
    async with memory_env(tmp_path, locale=locale) as env:
        await group_chat(env.core, 1, [("111", "Alice", "hi everyone"), ("222", "Bob", asked)])
        env.fake.reply_text(json.dumps({"should_update": False, "reason": "small talk", "daily_entry": "",
                                        "memory_update": ""}))
        outcome = await env.service.analyze_and_update_memory(1, GROUP)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        (request,) = env.fake.messages_requests()
        [daily] = outcome.files
        note, _ = await env.core.workspace.read_text(1, daily)
    listed = user_text(request).split("</transcript>", 1)[1]
    assert f"- Bob: {what}" in listed and "<asked_to_remember>" in listed
    assert daily.startswith("memory/") and f"- Bob: {what} (" in note and what not in memory


async def test_a_request_is_kept_even_when_the_model_changed_something_else(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, [("user", "I moved to Oslo last week"), ("assistant", "nice"),
                                      ("user", ASK), ("assistant", "ok")])
        env.fake.reply_text(json.dumps({"should_update": True, "reason": "moved", "daily_entry": "",
                                        "profile_edits": [{"append": "- lives in Oslo"}]}))
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        profile, _ = await env.core.workspace.read_text(1, "PROFILE.md")
    assert "- lives in Oslo" in profile and f"- {WHAT} (" in memory


async def test_a_request_already_in_memory_is_not_added_again(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, [("user", ASK), ("assistant", "ok")])
        env.fake.reply_text(nothing_kept())
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        await env.core.repos.messages.add_many(CONVERSATION, [("user", ASK, 1), ("assistant", "ok", 1)])
        env.fake.reply_text(nothing_kept())
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
    assert memory.count(WHAT) == 1


async def test_a_request_is_kept_when_the_models_own_change_was_over_budget(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"memory-max-chars": 400}) as env:
        await add_messages(env.core, [("user", ASK), ("assistant", "ok")])
        env.fake.reply_text(json.dumps({"should_update": True, "reason": "r", "daily_entry": "",
                                        "memory_update": "- " + "x" * 500}))
        env.fake.reply_text(json.dumps({"should_update": True, "reason": "r", "daily_entry": "",
                                        "memory_update": "- " + "y" * 500}))  # asked once to shorten it
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
    assert f"- {WHAT} (" in memory and "xxx" not in memory


@pytest.mark.parametrize(("said", "kept"), [
    ("please remember my flight is at 10:30 tomorrow", "please remember my flight is at 10:30 tomorrow"),
    ("remember this site https://example.com/foo", "remember this site https://example.com/foo"),
    ("Remember: I'm vegetarian. Can you suggest a recipe?", "I'm vegetarian."),
])
async def test_a_colon_inside_what_is_said_is_no_split(tmp_path: Path, said: str, kept: str) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, [("user", said), ("assistant", "ok")])
        env.fake.reply_text(nothing_kept())
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
    assert f"- {kept} (" in memory


async def test_a_scheduled_reminders_own_turn_is_no_request(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        turn = env.core.prompts.render("tasks/reminder-turn", message="Don't forget your pills",
                                       created_by="Ann", repeating=True)
        await add_messages(env.core, [("user", turn), ("assistant", "Time for your pills!")])
        env.fake.reply_text(nothing_kept())
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
    assert "pills" not in memory
