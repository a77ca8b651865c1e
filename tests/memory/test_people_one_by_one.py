"""A group's people one by one, for a model that holds little context (SPEC S34): a member whose
profile the group answer left unchanged is asked about alone, from their own lines only. Through
the real SDK on the fake Messages API, with real SQLite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memory.extraction.one_by_one import facts_of, with_facts
from memory.extraction.summarization import SMALL_MODEL_GROUP_REPLY_TOKENS
from memory.extraction.people_profiles import profile_filename
from tests.support.group_chat import GROUP, LINES, group_chat
from tests.support.memory_env import memory_env


def kept_nothing() -> str:
    return json.dumps({"should_update": False, "reason": "small talk", "daily_entry": "", "memory_update": ""})


def user_text(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    return content if isinstance(content, str) else "".join(block.get("text", "") for block in content)


async def test_members_are_asked_about_alone_from_their_own_lines(tmp_path: Path) -> None:
    async with memory_env(tmp_path, small_model=True, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        env.fake.reply_text(kept_nothing())
        env.fake.reply_text("- works as a nurse\n- has a cat called Miso\n- <another thing>")  # Alice
        env.fake.reply_text("Sure! Here you go:\n- lives in Porto")  # Bob
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
        bob = await env.core.workspace.get(group, profile_filename("telegram", "222"))
        _, asked_alice, asked_bob = env.fake.messages_requests()
    assert outcome.status == "completed" and "asked about 2 member(s) one by one" in outcome.reason
    assert alice is not None and alice.content == "# Alice\n\n- works as a nurse\n- has a cat called Miso\n"
    assert bob is not None and bob.content == "# Bob\n\n- lives in Porto\n"
    # Each is asked from their own lines only: what Bob said about Alice never reaches her call.
    assert "I work as a nurse" in user_text(asked_alice) and "my cat is called Miso" in user_text(asked_alice)
    assert "Porto" not in user_text(asked_alice) and "[Alice]" not in user_text(asked_alice)
    assert "I live in Porto and Alice plays chess" in user_text(asked_bob) and "nurse" not in user_text(asked_bob)


async def test_a_small_models_group_answer_does_not_decide_whose_fact_is_whose(tmp_path: Path) -> None:
    """The real lane's 1.5B model put Bob's parrot in Alice's profile; asked alone, each tells their own."""
    async with memory_env(tmp_path, small_model=True, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        env.fake.reply_text(json.dumps({"should_update": True, "reason": "r", "daily_entry": "",
                                        "people_updates": {"P1": ["works as a nurse", "lives in Porto"]}}))
        env.fake.reply_text("- works as a nurse\n- has a cat called Miso")  # Alice, asked alone
        env.fake.reply_text("NONE")  # Bob, asked alone, told nothing about himself
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
        bob = await env.core.workspace.get(group, profile_filename("telegram", "222"))
        requests = env.fake.messages_requests()
    assert outcome.status == "completed"  # (a profile written as a list of lines parses)
    assert len(requests) == 3 and "Bob wrote:" in user_text(requests[2])
    assert alice is not None and alice.content == "# Alice\n\n- works as a nurse\n- has a cat called Miso\n"
    assert bob is None


async def test_a_failed_call_about_one_member_leaves_the_group_answer_as_it_was(tmp_path: Path) -> None:
    async with memory_env(tmp_path, small_model=True, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        env.fake.reply_text(json.dumps({"should_update": True, "reason": "r", "daily_entry": "- talked"}))
        env.fake.reply_error(529, "overloaded_error", "Overloaded")  # Alice
        env.fake.reply_text("- lives in Porto")  # Bob
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        bob = await env.core.workspace.get(group, profile_filename("telegram", "222"))
    assert outcome.status == "completed" and any(f.startswith("memory/") for f in outcome.files)
    assert bob is not None and "- lives in Porto" in bob.content


async def test_without_the_small_model_flag_nobody_is_asked_alone(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        env.fake.reply_text(kept_nothing())
        await env.service.analyze_and_update_memory(group, GROUP)
        assert len(env.fake.messages_requests()) == 1


def test_facts_are_the_bullets_of_an_answer_not_new_to_the_profile() -> None:
    assert facts_of("Here:\n- nurse\n* likes tea\n- NONE\n- ...\nNONE") == ["nurse", "likes tea"]
    assert facts_of("NONE") == []
    assert with_facts("# Ann\n\n- nurse\n", "# Ann", ["Nurse", "likes tea"]) == "# Ann\n\n- nurse\n- likes tea\n"
    assert with_facts("", "# Ann", ["likes tea"]) == "# Ann\n\n- likes tea\n"
    assert with_facts("# Ann\n- likes tea\n", "# Ann", ["likes tea"]) is None


async def test_a_small_models_group_answer_is_kept_short(tmp_path: Path) -> None:
    sizes = []
    for small in (True, False):
        async with memory_env(tmp_path / str(small), small_model=small, **{"min-messages-for-summarize": 0}) as env:
            group = await env.core.agents.for_chat(GROUP, "Family")
            await group_chat(env.core, group, LINES)
            env.fake.reply_text(kept_nothing())
            env.fake.reply_text("NONE")
            env.fake.reply_text("NONE")
            await env.service.analyze_and_update_memory(group, GROUP)
            sizes.append(env.fake.messages_requests()[0]["max_tokens"])
    assert sizes[0] == SMALL_MODEL_GROUP_REPLY_TOKENS < sizes[1]


async def test_a_small_models_unusable_group_answer_still_has_its_people_asked_alone(tmp_path: Path) -> None:
    """The real lane's 1.5B model looped past the group answer's room twice; its people still count."""
    async with memory_env(tmp_path, small_model=True, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        env.fake.reply_text("I think everyone had a nice chat.")  # no JSON at all
        env.fake.reply_text("- works as a nurse")  # Alice
        env.fake.reply_text("- lives in Porto")  # Bob
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
    assert outcome.status == "completed" and "not usable" in outcome.reason, outcome
    assert alice is not None and "- works as a nurse" in alice.content
