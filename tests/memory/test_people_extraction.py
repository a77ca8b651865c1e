"""Memory extraction in a group: people by number, one profile per member, nothing written on a bad ref."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory.extraction.people_profiles import profile_filename
from tests.support.fakes.anthropic import TextReply
from tests.support.group_chat import GROUP, LINES, group_chat
from tests.support.memory_env import memory_env, user_prompt

def reply(**fields: object) -> str:
    return json.dumps({"should_update": True, "reason": "people", "daily_entry": "", **fields})


async def test_each_member_gets_a_profile_of_their_own_words_and_the_prompt_numbers_them(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat("tg:-1001", "Family")
        await group_chat(env.core, group, LINES)
        env.fake.push(TextReply(reply(
            memory_update="- Bob says Alice plays chess",
            people_updates={"P1": "- nurse\n- cat Miso"}, people_edits={"P2": [{"append": "- lives in Porto"}]})))
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
        bob = await env.core.workspace.get(group, profile_filename("telegram", "222"))
        shared = await env.core.workspace.get(group, "MEMORY.md")
        prompt, system = user_prompt(env.fake.requests[-1].body), json.dumps(env.fake.requests[-1].body["system"])
        profile = await env.core.workspace.get(group, "PROFILE.md")
    assert outcome.status == "completed", outcome
    assert "P1 = Alice" in prompt and "P2 = Bob" in prompt
    assert "P1 Alice: I work as a nurse" in prompt and "P2 Bob: I live in Porto" in prompt
    assert "[Alice]" not in prompt.split("<transcript>")[1]  # the number says who; no name twice
    assert "people_updates" in system and "profile_update" not in system
    assert alice is not None and alice.content == "# Alice\n\n- nurse\n- cat Miso\n" and not alice.enabled
    assert bob is not None and bob.content == "# Bob\n- lives in Porto\n" and not bob.enabled
    assert shared is not None and "chess" in shared.content
    assert profile is None


@pytest.mark.parametrize("answer", [
    reply(people_updates={"P3": "- a stranger"}),  # nobody is P3
    reply(people_edits={"Alice": [{"append": "- x"}]}),  # a name, not a number
    reply(profile_update="# Profile\n\n- Alice is a nurse"),  # a direct chat's field
    reply(people_updates=["P1", "nurse"]),  # not an object
])
async def test_a_reply_naming_someone_not_listed_writes_nothing(tmp_path: Path, answer: str) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat("tg:-1001", "Family")
        await group_chat(env.core, group, LINES)
        for _ in range(3):  # every try answers the same
            env.fake.push(TextReply(answer))
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        files = [f.filename for f in await env.core.workspace.list(group)]
        watermark = (await env.core.repos.conversations.get(GROUP)).memory_upto_message_id  # type: ignore[union-attr]
    assert outcome.status == "failed" and "invalid JSON reply" in outcome.reason
    assert not [f for f in files if f.startswith("people/") or f.startswith("memory/")]
    assert watermark == 0  # the messages are tried again later


async def test_a_profile_over_its_budget_is_not_written(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0, "person-max-chars": 40}) as env:
        group = await env.core.agents.for_chat("tg:-1001", "Family")
        await group_chat(env.core, group, LINES)
        too_long = reply(people_updates={"P1": "- " + "nurse " * 20, "P2": "- Porto"})
        env.fake.push(TextReply(too_long))
        env.fake.push(TextReply(too_long))  # asked to shorten, it does not
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
        bob = await env.core.workspace.get(group, profile_filename("telegram", "222"))
    assert outcome.status == "failed" and "people/telegram-111.md would be" in outcome.reason
    assert alice is None and bob is not None and bob.content == "# Bob\n\n- Porto\n"


async def test_a_direct_chat_still_keeps_profile_md(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        await env.core.repos.conversations.create("tg:5", agent_id=1, channel="telegram", chat_key="tg:5",
                                                  trigger_source="channel")
        await env.core.repos.messages.add_user("tg:5", "I work as a nurse", 1, "5", "Ana", None)
        env.fake.push(TextReply(reply(profile_update="# Profile\n\n- nurse")))
        outcome = await env.service.analyze_and_update_memory(1, "tg:5")
        profile = await env.core.workspace.get(1, "PROFILE.md")
        prompt = user_prompt(env.fake.requests[-1].body)
    assert outcome.status == "completed" and profile is not None and "nurse" in profile.content
    assert "User: I work as a nurse" in prompt and "P1" not in prompt


async def test_a_group_batch_where_only_the_assistant_spoke_never_writes_a_profile_md(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat("tg:-1001", "Family")
        await env.core.repos.conversations.create(GROUP, agent_id=group, channel="telegram", chat_key=GROUP,
                                                  trigger_source="channel", is_group=True)
        await env.core.repos.messages.add_turn(GROUP, [("assistant", "good morning, everyone", 1, "text")])
        for _ in range(3):
            env.fake.push(TextReply(reply(profile_update="# Profile\n\n- the group likes mornings")))
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        profile = await env.core.workspace.get(group, "PROFILE.md")
        system = json.dumps(env.fake.requests[-1].body["system"])
    assert outcome.status == "failed" and profile is None
    assert "people_updates" in system  # the group's prompt, even with nobody numbered


async def test_a_profile_always_starts_with_its_members_name(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat("tg:-1001", "Family")
        await group_chat(env.core, group, LINES)
        env.fake.push(TextReply(reply(people_updates={"P1": "# Bob\n\n- nurse", "P2": "- lives in Porto"})))
        await env.service.analyze_and_update_memory(group, GROUP)
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
        bob = await env.core.workspace.get(group, profile_filename("telegram", "222"))
    assert alice is not None and alice.content == "# Alice\n\n- nurse\n"
    assert bob is not None and bob.content == "# Bob\n\n- lives in Porto\n"


async def test_a_small_models_repeated_keys_and_empty_lists_are_read_as_meant(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat("tg:-1001", "Family")
        await group_chat(env.core, group, LINES)
        env.fake.push(TextReply('{"should_update": true, "reason": "r", "daily_entry": "", "people_updates": [], '
                                '"people_edits": {"P1": [{"append": "- nurse"}]}, '
                                '"people_edits": {"P2": [{"append": "- Porto"}]}}'))
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
        bob = await env.core.workspace.get(group, profile_filename("telegram", "222"))
    assert outcome.status == "completed", outcome
    assert alice is not None and "nurse" in alice.content and bob is not None and "Porto" in bob.content
