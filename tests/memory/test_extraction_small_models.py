"""Extraction that works on small models (SPEC S34): a retry names what was wrong and is never the same
request again; an edit that misses fails alone; edits beside a replacement are applied to it; a
malformed group reply is a failed run; the seed's placeholder lines are replaced. Through the real
SDK on the fake Messages API, with real SQLite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory.extraction.people_profiles import profile_filename
from tests.support.group_chat import GROUP, LINES, group_chat
from tests.support.memory_env import CONVERSATION, add_messages, chat, memory_env

DAILY = "memory/2026-04-01.md"


def answer(daily: str = "", **fields: Any) -> str:
    return json.dumps({"should_update": True, "reason": "kept", "daily_entry": daily, **fields}, ensure_ascii=False)


def text_of(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(block.get("text", "") for block in content)


def assert_a_correction_after_the_same_prompt(first: dict[str, Any], retry: dict[str, Any], reply: str) -> str:
    """The retry keeps the first request's system prompt and message (the cached part) and adds the
    answer it could not use and a correction after them; returns the correction."""
    assert retry != first
    assert retry["system"] == first["system"] and retry["messages"][0] == first["messages"][0]
    assert [m["role"] for m in retry["messages"]] == ["user", "assistant", "user"]
    assert text_of(retry["messages"][1]) == reply.strip()
    return text_of(retry["messages"][2])


# -- a retry is never the byte-identical prompt -----------------------------------------------


@pytest.mark.parametrize(("locale", "heading"), [("en", "could not be used"), ("zh-CN", "无法使用")])
async def test_a_retry_after_invalid_json_carries_the_answer_and_the_error(
    tmp_path: Path, locale: str, heading: str,
) -> None:
    prose = "I think the user likes coffee."
    async with memory_env(tmp_path, locale=locale) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(prose)
        env.fake.reply_text(answer("- likes coffee"))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        runs = await env.core.repos.memory_runs.for_conversation(CONVERSATION)
        first, retry = env.fake.messages_requests()
    correction = assert_a_correction_after_the_same_prompt(first, retry, prose)
    assert heading in correction and "no JSON object in the reply" in correction
    assert outcome.status == "completed"
    assert [r.status for r in runs] == ["failed", "completed"]


async def test_the_workers_next_try_carries_the_correction_too(tmp_path: Path) -> None:
    """The worker retries a pending row with one attempt per call, minutes apart."""
    bad = answer("- met Ann", memory_edits=[{"old": 5, "new": "- Ann lives in Oslo"}])  # "old" is no text
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(bad)
        failed = await env.service.analyze_and_update_memory(1, CONVERSATION, attempts=1)
        env.fake.reply_text(answer("- met Ann", memory_edits=[{"append": "- Ann lives in Oslo"}]))
        retried = await env.service.analyze_and_update_memory(1, CONVERSATION, attempts=1)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        env.fake.reply_text(answer("- more"))
        await env.core.repos.messages.add_many(CONVERSATION, [("user", "one more thing to note", 1)])
        await env.service.analyze_and_update_memory(1, CONVERSATION, attempts=1)
        first, retry, later = env.fake.messages_requests()
    assert failed.status == "failed" and failed.retryable and "memory_edits[0]" in failed.reason
    correction = assert_a_correction_after_the_same_prompt(first, retry, bad)
    assert 'memory_edits[0]: an edit needs "old"' in correction
    assert retried.status == "completed" and "- Ann lives in Oslo" in memory
    assert len(later["messages"]) == 1  # a batch that worked leaves nothing to correct


async def test_a_reply_whose_every_change_misses_is_retried_naming_each_edit(tmp_path: Path) -> None:
    # (a deletion: an edit's new text in a file that holds nothing yet would be written as is)
    copied = answer(profile_edits=[{"old": "...", "new": "..."}], memory_edits=[{"old": "- Ann in Oslo", "new": ""}])
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        before = await env.core.workspace.read_text(1, "PROFILE.md")
        for _ in range(6):
            env.fake.reply_text(copied)
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        after = await env.core.workspace.read_text(1, "PROFILE.md")
        requests = env.fake.messages_requests()
        runs = await env.core.repos.memory_runs.for_conversation(CONVERSATION)
    # Each attempt asks once for the failed edits, then the next attempt starts with the correction.
    assert len(requests) == 6
    assert len({json.dumps(r, sort_keys=True) for r in requests}) == 6
    second_attempt = requests[2]
    correction = assert_a_correction_after_the_same_prompt(requests[0], second_attempt, copied)
    assert "profile_edits[0]" in correction and "placeholder from the example" in correction
    assert 'memory_edits[0]: its "old" text is not in MEMORY.md: "- Ann in Oslo"' in correction
    assert outcome.status == "failed" and "unusable reply" in outcome.reason
    assert [r.status for r in runs] == ["failed"] * 3
    assert after == before


# -- an edit that misses fails alone ------------------------------------------------------------


async def test_an_edit_whose_old_text_is_not_in_the_file_fails_alone(tmp_path: Path) -> None:
    first = answer("- met Ann", memory_edits=[
        {"old": "...", "new": "- copied from the example"},
        {"old": "- coffee", "new": "- black coffee"},  # not in the file
        {"old": "- milk", "new": "- oat milk"},  # twice in the file
        {"old": "- tea", "new": "- green tea"},
        {"append": "- Ann lives in Oslo"},
    ])
    async with memory_env(tmp_path) as env:
        await env.core.workspace.write(1, "MEMORY.md", "# Memory\n- tea\n- milk\n- milk\n")
        await add_messages(env.core, chat(2))
        env.fake.reply_text(first)
        env.fake.reply_text(answer(should_update=False))  # asked to correct them, the model gives up
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        note, _ = await env.core.workspace.read_text(1, DAILY)
        runs = await env.core.repos.memory_runs.for_conversation(CONVERSATION)
        requests = env.fake.messages_requests()
    assert memory == "# Memory\n- green tea\n- milk\n- milk\n- Ann lives in Oslo\n"
    assert note == "# 2026-04-01\n\n- met Ann\n"
    assert outcome.status == "completed" and [r.status for r in runs] == ["completed"]
    assert all(f"left out memory_edits[{n}]" in outcome.reason for n in range(3))
    correction = text_of(requests[1]["messages"][2])
    assert "the rest of it is kept" in correction
    assert 'memory_edits[0]: "..." is the placeholder from the example' in correction
    assert 'memory_edits[1]: its "old" text is not in MEMORY.md: "- coffee"' in correction
    assert 'memory_edits[2]: its "old" text appears 2 times in MEMORY.md' in correction
    assert "memory_edits[3]" not in correction


@pytest.mark.parametrize("old", ["- nowhere", "- tea"])  # not found, found twice
async def test_an_edit_that_misses_is_asked_once_to_be_corrected_and_the_rest_is_kept(
    tmp_path: Path, old: str,
) -> None:
    """Replaces S19's "redone once on fresh contents": that resent the same prompt, and dropped the
    whole reply for one edit."""
    async with memory_env(tmp_path) as env:
        await env.core.workspace.write(1, "MEMORY.md", "# Memory\n- tea\n- tea\n")
        await add_messages(env.core, chat(2))
        env.fake.reply_text(answer("- first try", memory_edits=[{"old": old, "new": "- coffee"}]))
        env.fake.reply_text(answer("- second try", memory_edits=[{"old": old, "new": "- coffee"}]))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION, attempts=1)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        note, _ = await env.core.workspace.read_text(1, DAILY)
        first, second = env.fake.messages_requests()
    assert outcome.status == "completed" and "left out memory_edits[0]" in outcome.reason
    assert memory == "# Memory\n- tea\n- tea\n"  # the edit that missed is not applied
    assert note == "# 2026-04-01\n\n- first try\n"  # the rest of the first answer is kept
    assert second["messages"][0] == first["messages"][0]
    assert "memory_edits[0]" in text_of(second["messages"][2])


async def test_a_corrected_edit_goes_on_top_of_the_kept_ones_without_doing_them_twice(tmp_path: Path) -> None:
    edits = [{"old": "- tea", "new": "- green tea"}, {"append": "- Ann lives in Oslo"}]
    async with memory_env(tmp_path) as env:
        await env.core.workspace.write(1, "MEMORY.md", "# Memory\n- tea\n- a cat\n")
        await add_messages(env.core, chat(2))
        env.fake.reply_text(answer("- met Ann", memory_edits=[*edits, {"old": "- a dog", "new": "- a cat, Miso"}]))
        # The whole object again, as asked: the kept edits once more and the fixed one.
        env.fake.reply_text(answer("- met Ann", memory_edits=[*edits, {"old": "- a cat", "new": "- a cat, Miso"}]))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        correction = text_of(env.fake.messages_requests()[1]["messages"][-1])
    assert 'memory_edits[2]: its "old" text is not in MEMORY.md: "- a dog"' in correction
    assert memory == "# Memory\n- green tea\n- a cat, Miso\n- Ann lives in Oslo\n"
    assert outcome.status == "completed" and "left out" not in outcome.reason


# -- edits beside a full replacement --------------------------------------------------------------


async def test_edits_beside_a_full_replacement_are_applied_to_it(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(answer("- met Ann", profile_update="# Profile\n- nurse\n- lives in Oslo",
                                   profile_edits=[{"old": "- nurse", "new": "- nurse at the city hospital"},
                                                  {"append": "- has a cat called Miso"},
                                                  {"append": "- lives in Oslo"}]))  # already there: not twice
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        profile, _ = await env.core.workspace.read_text(1, "PROFILE.md")
    assert outcome.status == "completed", outcome
    assert profile == "# Profile\n- nurse at the city hospital\n- lives in Oslo\n- has a cat called Miso\n"


async def test_a_groups_people_edits_beside_a_replacement_are_applied_to_it(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        env.fake.reply_text(answer("- Alice and Bob talked", people_updates={"P1": "- nurse", "P2": "- lives in Porto"},
                                   people_edits={"P1": [{"append": "- cat called Miso"}],
                                                 "P2": [{"old": "- lives in Porto", "new": "- lives in Porto, Foz"}]}))
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
        bob = await env.core.workspace.get(group, profile_filename("telegram", "222"))
    assert outcome.status == "completed", outcome
    assert alice is not None and alice.content == "# Alice\n\n- nurse\n- cat called Miso\n"
    assert bob is not None and bob.content == "# Bob\n\n- lives in Porto, Foz\n"


async def test_changes_written_beside_should_update_false_are_kept(tmp_path: Path) -> None:
    """The real lane's 1.5B model wrote every person's profile and then said should_update: false."""
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        env.fake.reply_text(json.dumps({"should_update": False, "reason": "small talk", "daily_entry": "",
                                        "memory_update": "", "memory_edits": [],
                                        "people_updates": {"P1": "# Alice\n\n- nurse", "P2": ""},
                                        "people_edits": []}))
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
    assert outcome.status == "completed" and outcome.updated, outcome
    assert alice is not None and alice.content == "# Alice\n\n- nurse\n"


async def test_should_update_false_with_nothing_written_keeps_nothing(tmp_path: Path) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(json.dumps({"should_update": False, "reason": "small talk", "daily_entry": " ",
                                        "memory_update": "", "profile_update": "", "profile_edits": []}))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
    assert outcome.status == "completed" and not outcome.updated and outcome.files == ()


# -- a malformed group reply is a failed run --------------------------------------------------------


@pytest.mark.parametrize("reply", [
    answer("- Alice is a nurse", people={"P1": "- nurse"}),  # not a field of the reply
    answer("- talked", P1=["- nurse"], P2=["- lives in Porto"]),  # people as top-level fields
    answer("- <what happened, who said it>",  # the example, copied
           people_updates={"P1": "# Alice\n\n- <what Alice said about herself>"}),
])
async def test_a_malformed_group_reply_is_a_failed_run_with_nothing_written(tmp_path: Path, reply: str) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        for _ in range(6):  # the same every time (the copied example is also asked once more within a try)
            env.fake.reply_text(reply)
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        files = [f.filename for f in await env.core.workspace.list(group)]
        runs = await env.core.repos.memory_runs.for_conversation(GROUP)
        conversation = await env.core.repos.conversations.get(GROUP)
    assert outcome.status == "failed" and outcome.retryable
    assert runs and all(r.status == "failed" for r in runs)
    assert not [f for f in files if f.startswith(("people/", "memory/"))]
    assert conversation is not None and conversation.memory_upto_message_id == 0


async def test_a_direct_reply_with_an_unknown_field_is_retried_naming_it(tmp_path: Path) -> None:
    misspelt = answer("- likes tea", profile_edit=[{"append": "- likes tea"}], confidence=0.9)
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(misspelt)
        env.fake.reply_text(answer("- likes tea", profile_edits=[{"append": "- likes tea"}]))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        profile, _ = await env.core.workspace.read_text(1, "PROFILE.md")
        first, retry = env.fake.messages_requests()
    correction = assert_a_correction_after_the_same_prompt(first, retry, misspelt)
    assert "profile_edit: not a field of this reply" in correction and "confidence" not in correction
    assert outcome.status == "completed" and profile.endswith("- likes tea\n")


# -- the seed's placeholder lines ---------------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    {"profile_edits": [{"append": "- likes tea"}]},
    {"profile_edits": [{"old": "Nothing known yet.", "new": "- likes tea"}]},  # edited inside the line
    {"profile_update": "# User profile\n\n_Nothing known yet._\n- likes tea"},
])
async def test_the_seeds_placeholder_line_is_replaced_by_the_first_fact(tmp_path: Path, fields: dict[str, Any]) -> None:
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(answer("- tea", **fields))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        profile, _ = await env.core.workspace.read_text(1, "PROFILE.md")
    assert outcome.status == "completed", outcome
    assert profile == "# User profile\n\n- likes tea\n"


async def test_a_chinese_seeds_placeholder_is_replaced_too(tmp_path: Path) -> None:
    async with memory_env(tmp_path, locale="zh-CN") as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(answer("- 喝茶", memory_edits=[{"append": "- 周六去爬山"}],
                                   profile_edits=[{"old": "暂无，还不了解这位用户。", "new": "- 喜欢喝茶"}]))
        await env.service.analyze_and_update_memory(1, CONVERSATION)
        memory, _ = await env.core.workspace.read_text(1, "MEMORY.md")
        profile, _ = await env.core.workspace.read_text(1, "PROFILE.md")
    assert memory == "# 核心记忆\n\n- 周六去爬山\n"
    assert profile == "# 用户画像\n\n- 喜欢喝茶\n"


# -- the request a small model gets ----------------------------------------------------------------


async def test_the_prompts_own_frame_echoed_into_a_profile_is_left_out(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        echo = {"append": '<profile ref="P2">(empty)</profile>'}
        env.fake.reply_text(answer("- talked", people_updates={"P1": "# Alice\n\n- nurse"}, people_edits={"P2": [echo]}))
        env.fake.reply_text(answer("- talked", people_edits={"P2": [echo]}))  # asked once to correct it
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        bob = await env.core.workspace.get(group, profile_filename("telegram", "222"))
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
    assert outcome.status == "completed", outcome
    assert bob is None
    assert alice is not None and "- nurse" in alice.content


async def test_an_edit_in_a_profile_that_holds_nothing_yet_writes_its_new_text(tmp_path: Path) -> None:
    """The real group lane's 1.5B model "replaced" a line it made up in a new person's profile."""
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        env.fake.reply_text(json.dumps({"people_edits": {"P2": [{"old": "Bob is a carpenter", "new": "- lives in Porto"}]},
                                        "daily_entry": "", "reason": "facts"}))  # and no should_update at all
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        bob = await env.core.workspace.get(group, profile_filename("telegram", "222"))
    assert outcome.status == "completed", outcome
    assert bob is not None and bob.content == "# Bob\n- lives in Porto\n"  # as an append writes it


async def test_fields_that_only_say_unchanged_are_no_new_text(tmp_path: Path) -> None:
    """A confused "false" answer with "(unchanged)" in its fields must not replace the files."""
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        before = {name: (await env.core.workspace.read_text(1, name))[0] for name in ("MEMORY.md", "PROFILE.md")}
        env.fake.reply_text(json.dumps({"should_update": False, "reason": "nothing", "daily_entry": "- weather talk",
                                        "memory_update": "(unchanged)", "profile_update": "No changes."}))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        after = {name: (await env.core.workspace.read_text(1, name))[0] for name in ("MEMORY.md", "PROFILE.md")}
    assert after == before
    assert outcome.files == ()  # a daily entry alone does not overrule an explicit false


async def test_a_reply_without_the_flag_and_with_unknown_fields_is_corrected_not_skipped(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        env.fake.reply_text(json.dumps({"P1": "# Alice\n- nurse"}))
        env.fake.reply_text(answer("- talked", people_updates={"P1": "# Alice\n\n- nurse"}))
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
        first, retry = env.fake.messages_requests()
    assert "P1: not a field of this reply" in text_of(retry["messages"][-1])
    assert outcome.status == "completed" and alice is not None and "- nurse" in alice.content


async def test_an_edit_that_changes_nothing_or_writes_the_prompts_marker_is_left_out(tmp_path: Path) -> None:
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat(GROUP, "Family")
        await group_chat(env.core, group, LINES)
        env.fake.reply_text(answer("- talked", people_edits={
            "P1": [{"old": "empty", "new": "empty"}],
            "P2": [{"append": '<profile ref="P2">\n(empty)\n</profile>'}]}))
        env.fake.reply_text(answer("- talked"))  # asked once to correct the copied marker
        await env.service.analyze_and_update_memory(group, GROUP)
        alice = await env.core.workspace.get(group, profile_filename("telegram", "111"))
        bob = await env.core.workspace.get(group, profile_filename("telegram", "222"))
    assert alice is None and bob is None


async def test_an_edit_with_only_new_text_adds_it(tmp_path: Path) -> None:
    """The real lane's 1.5B model wrote {"new": "..."} for a line to add, four extractions in a row."""
    async with memory_env(tmp_path) as env:
        await add_messages(env.core, chat(2))
        env.fake.reply_text(answer("- moved", profile_edits=[{"new": "- lives in Leipzig"}, {"old": "", "new": "- cycles"}]))
        outcome = await env.service.analyze_and_update_memory(1, CONVERSATION)
        profile, _ = await env.core.workspace.read_text(1, "PROFILE.md")
    assert outcome.status == "completed", outcome
    assert "- lives in Leipzig\n- cycles" in profile
