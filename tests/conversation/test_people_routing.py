"""People through the router and the model requests: start-up recovery, cron, a group's profiles."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bot.app.core import open_core
from bot.llm import AnthropicClient
from bot.app.runtime import Runtime, open_runtime
from bot.storage.migrations import MIGRATIONS
from bot.storage.search_text import FUNCTION_NAME, spaced
from channels.base import InboundMessage
from memory.extraction.people_profiles import profile_filename
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic

OWNER, FRIEND = "42", "7"


@asynccontextmanager
async def runtime(tmp_path: Path, **mate: Any) -> AsyncIterator[tuple[Runtime, FakeAnthropic]]:
    async with FakeAnthropic(default_text="ok") as llm:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": llm.url, "max-retries": 0, "stream": False},
                             channels={"telegram": {"admins": [OWNER], "allowed-users": [FRIEND],
                                                   "group-policy": "open"}}, **mate)
        async with AnthropicClient(config.mate.llm) as client, \
                open_runtime(config, llm=client, with_memory_worker=False) as rt:
            yield rt, llm


def direct(sender: str, text: str) -> InboundMessage:
    return InboundMessage(channel="telegram", chat_id=sender, sender_id=sender, sender_name=f"user{sender}", text=text)


def in_group(sender: str, name: str, text: str) -> InboundMessage:
    return InboundMessage(channel="telegram", chat_id="-1001", sender_id=sender, sender_name=name, text=text,
                          is_direct=False, mentions_bot=True, chat_title="Family")


def systems(llm: FakeAnthropic) -> list[str]:
    return [json.dumps(r.body["system"], ensure_ascii=False) for r in llm.requests if r.path == "/v1/messages"]


async def test_start_up_recovery_never_answers_a_friend_with_the_owners_agent(tmp_path: Path) -> None:
    async with runtime(tmp_path) as (rt, llm):
        await rt.core.workspace.write(1, "PROFILE.md", "# Profile\n\nowner code KIWI-4410\n")
        repos = rt.core.repos
        # Stored under the old route (every direct chat on agent 1), then the process stopped.
        for sender in (FRIEND, OWNER):
            await repos.conversations.create(f"tg:{sender}", agent_id=1, channel="telegram", chat_key=f"tg:{sender}",
                                             trigger_source="channel")
            await repos.messages.add_user(f"tg:{sender}", f"left unanswered from {sender}", 3, sender, "x", None)
        replies = await rt.router.recover_unanswered("2000-01-01")
        sent = systems(llm)
    assert [r.conversation_id for r in replies] == [f"tg:{OWNER}"]  # the owner's is still the owner's
    assert len(sent) == 1 and "KIWI-4410" in sent[0]


async def test_start_up_recovery_answers_no_group_that_is_no_longer_allowed(tmp_path: Path) -> None:
    # A group message stored while the group was allowed (and routed to agent 1), then the process
    # stopped and the group was taken out of the allowlist: it is not answered from agent 1.
    async with FakeAnthropic(default_text="ok") as llm:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": llm.url, "max-retries": 0, "stream": False},
                             channels={"telegram": {"admins": [OWNER], "group-policy": "allowlist",
                                                    "allowed-groups": ["-1002"]}},
                             routing=[{"channel": "*", "chat": "*", "agent": 1}])
        async with AnthropicClient(config.mate.llm) as client, \
                open_runtime(config, llm=client, with_memory_worker=False) as rt:
            replies, sent, created = await _recover_in_two_groups(rt, llm)
    assert [r.conversation_id for r in replies] == ["tg:-1002"]  # the group still allowed is answered
    assert len(sent) == 1
    assert created == 0  # checking a route made no agent


async def _recover_in_two_groups(rt: Runtime, llm: FakeAnthropic) -> tuple[list[Any], list[str], int]:
    await rt.core.workspace.write(1, "PROFILE.md", "# Profile\n\nowner code KIWI-4410\n")
    repos = rt.core.repos
    for group in ("-1001", "-1002"):
        key = f"tg:{group}"
        await repos.conversations.create(key, agent_id=1, channel="telegram", chat_key=key,
                                         trigger_source="channel", is_group=True)
        await repos.messages.add_user(key, f"left unanswered in {group}", 3, OWNER, "x", None)
    agents_before = await rt.core.db.fetchall("SELECT id FROM mate_agent")
    replies = await rt.router.recover_unanswered("2000-01-01")
    agents_after = await rt.core.db.fetchall("SELECT id FROM mate_agent")
    return list(replies), systems(llm), len(agents_after) - len(agents_before)


async def test_a_cron_turn_makes_no_person(tmp_path: Path) -> None:
    async with runtime(tmp_path) as (rt, _):
        await rt.router.handle(InboundMessage(channel="cron", chat_id="job-1", sender_id="cron", sender_name="cron",
                                              text="nightly review", trigger_source="cron"), agent_id=1)
        await rt.router.handle(direct(FRIEND, "hello"))
        listed = await rt.core.people.list()
    assert [(p.name, p.accounts) for p in listed] == [("Owner", (f"telegram:{OWNER}",)),
                                                      (f"user{FRIEND}", (f"telegram:{FRIEND}",))]


async def test_a_group_request_shows_the_sender_and_recent_speakers_profiles_newest_first(tmp_path: Path) -> None:
    async with runtime(tmp_path, memory={"group-profiles-max": 2}) as (rt, llm):
        for sender, name in (("1", "Ana"), ("2", "Bo"), ("3", "Cy")):
            await rt.router.handle(in_group(sender, name, f"@mate_bot hi from {name}"))
        group = await rt.core.agents.for_chat("tg:-1001", "Family")
        for sender, name in (("1", "Ana"), ("2", "Bo"), ("3", "Cy")):
            await rt.core.workspace.write(group, profile_filename("telegram", sender), f"# {name}\n\n- {name}-FACT\n")
        await rt.router.handle(in_group("1", "Ana", "@mate_bot what do you know"))
        await rt.router.handle(direct(OWNER, "and in private?"))
        group_system, owner_system = systems(llm)[-2:]
    blocks = [b for b in group_system.split("--- ") if b.startswith("people/")]
    assert [b.split(" ---")[0] for b in blocks] == ["people/telegram-1.md", "people/telegram-3.md"]  # Ana, then Cy
    assert group_system.index("--- MEMORY.md ---") < group_system.index("--- people/telegram-1.md ---")
    assert "Bo-FACT" not in group_system  # beyond group-profiles-max
    assert "FACT" not in owner_system  # never in a direct chat


async def test_group_profiles_max_0_shows_none(tmp_path: Path) -> None:
    async with runtime(tmp_path, memory={"group-profiles-max": 0}) as (rt, llm):
        await rt.router.handle(in_group("1", "Ana", "@mate_bot hi"))
        group = await rt.core.agents.for_chat("tg:-1001", "Family")
        await rt.core.workspace.write(group, profile_filename("telegram", "1"), "# Ana\n\n- Ana-FACT\n")
        await rt.router.handle(in_group("1", "Ana", "@mate_bot again"))
    assert "Ana-FACT" not in systems(llm)[-1]


async def test_an_older_database_marks_its_groups_and_sets_a_groups_old_profile_aside(tmp_path: Path) -> None:
    path = tmp_path / "mate.db"
    with sqlite3.connect(path) as conn:  # a database as version 9 left it
        conn.create_function(FUNCTION_NAME, 1, spaced, deterministic=True)
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
                     "applied_time TEXT NOT NULL)")
        for version, description, statements in MIGRATIONS:
            if version <= 9:
                for statement in statements:
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version VALUES (?, ?, 'x')", (version, description))
        conn.execute("INSERT INTO mate_agent VALUES (1, 'Mate', 'x', 'x'), (5, 'Guild', 'x', 'x')")
        conn.execute("INSERT INTO mate_chat_agent VALUES ('tg:-100', 5, 'x')")
        conn.executemany(
            "INSERT INTO mate_workspace_file(agent_id, filename, content, file_size, enabled, sort_order, "
            "create_time, update_time) VALUES (?, 'PROFILE.md', ?, 1, 1, 2, 'x', 'x')",
            [(1, "owner profile"), (5, "mixed members")])
        for key, agent in (("tg:-100", 5), ("dc:300", 1), ("dc:400", 1), ("tg:9", 1)):
            conn.execute("INSERT INTO mate_conversation(id, agent_id, channel, chat_key, trigger_source, "
                         "create_time, update_time) VALUES (?, ?, 'x', ?, 'channel', 'x', 'x')", (key, agent, key))
        conn.executemany(  # a Discord server channel on agent 1 (two speakers) and a DM (one)
            "INSERT INTO mate_message(conversation_id, role, content, token_count, sender_id, create_time) "
            "VALUES (?, 'user', 'hi', 1, ?, 'x')", [("dc:300", "a"), ("dc:300", "b"), ("dc:400", "a")])
    async with open_core(make_config(tmp_path)) as core:
        groups = {key: (await core.repos.conversations.get(key)).is_group  # type: ignore[union-attr]
                  for key in ("tg:-100", "dc:300", "dc:400", "tg:9")}
        owner_profile = await core.workspace.get(1, "PROFILE.md")
        group_profile = await core.workspace.get(5, "PROFILE.md")
    assert groups == {"tg:-100": True, "dc:300": True, "dc:400": False, "tg:9": False}
    assert owner_profile is not None and owner_profile.enabled
    assert group_profile is not None and not group_profile.enabled and group_profile.content == "mixed members"
