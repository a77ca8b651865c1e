"""DiscordChannel: the real discord.py client on FakeDiscord, the real router, SDK and SQLite (SPEC S10, S13)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from channels.base import OutboundMessage
from memory.workspace.service import MEMORY_FILE
from tests.support.fakes.anthropic import untimed
from tests.support.discord_env import ADMIN, ALLOWED, Env, open_env


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async for opened in open_env(tmp_path, stream=False):
        yield opened


async def test_guild_mention_is_answered_in_channel(env: Env) -> None:
    env.fa.reply_text("hello alice")
    incoming = await env.dc.send_guild_message("what's up?", mention_bot=True)
    sent = await env.dc.wait_sent(1)
    assert sent[0]["channel_id"] == "200" and sent[0]["content"] == "hello alice"
    assert str(sent[0]["message_reference"]["message_id"]) == incoming["id"]
    assert sent[0]["allowed_mentions"]["parse"] == []
    # The mention is stripped and the speaker named, as for any group message (S4).
    request = env.fa.messages_requests()[0]
    assert untimed(request["messages"][-1]["content"]) == "[alice] what's up?"
    assert "200" in env.dc.typing_calls
    conversation = await env.rt.core.repos.conversations.active_for_chat("dc:200")
    assert conversation is not None and conversation.agent_id != 1  # a group gets its own agent


async def test_guild_message_without_mention_is_ignored(env: Env) -> None:
    await env.dc.send_guild_message("just chatting among ourselves")
    env.fa.reply_text("yes?")
    await env.dc.send_guild_message("now you", mention_bot=True)  # events are handled in order
    await env.dc.wait_sent(1)
    await asyncio.sleep(0.1)
    assert [untimed(r["messages"][-1]["content"]) for r in env.fa.messages_requests()] == ["[alice] now you"]
    assert [m["content"] for m in env.dc.sent_messages] == ["yes?"]
    assert env.dc.typing_calls == ["200"]  # no typing for a message the bot ignores


async def test_dm_from_allowed_user_is_answered(env: Env) -> None:
    env.fa.reply_text("hi in private")
    await env.dc.send_dm("hello there", author_id=ALLOWED)
    sent = await env.dc.wait_sent(1)
    assert sent[0]["channel_id"] == "300" and sent[0]["content"] == "hi in private"
    assert untimed(env.fa.messages_requests()[0]["messages"][-1]["content"]) == "hello there"
    conversation = await env.rt.core.repos.conversations.active_for_chat("dc:300")
    assert conversation is not None and conversation.agent_id != 1  # a friend has an agent of their own


async def test_dm_from_unknown_user_gets_one_line_with_their_id(env: Env) -> None:
    await env.dc.send_dm("let me in", author_id="777", username="mallory")
    sent = await env.dc.wait_sent(1)
    assert sent[0]["content"] == env.text("not_allowed", user_id="777")
    assert "777" in sent[0]["content"] and "\n" not in sent[0]["content"]
    assert env.fa.messages_requests() == []


async def test_guild_outside_allowed_guilds_is_ignored(env: Env) -> None:
    # Guild 999 is not cached, so discord.py hands over message.guild None: still not a DM.
    await env.dc.dispatch("MESSAGE_CREATE", _message("<@900> hi from elsewhere", guild_id="999", channel_id="990"))
    env.fa.reply_text("home")
    await env.dc.send_guild_message("and here?", mention_bot=True)
    await env.dc.wait_sent(1)
    await asyncio.sleep(0.1)
    assert [m["channel_id"] for m in env.dc.sent_messages] == ["200"]
    assert len(env.fa.messages_requests()) == 1
    assert await env.rt.core.repos.conversations.active_for_chat("dc:990") is None


async def test_an_admin_in_a_server_not_allowed_gets_its_id_in_one_line(env: Env) -> None:
    await env.dc.dispatch("MESSAGE_CREATE", _message("<@900> hello", guild_id="999", channel_id="990",
                                                     author_id=ADMIN))
    await env.dc.wait_sent(1)
    (sent,) = env.dc.sent_messages
    assert sent["channel_id"] == "990" and "999" in sent["content"] and "allowed-guilds" in sent["content"]
    assert env.fa.messages_requests() == []


async def test_thread_started_by_the_bot_is_its_own_conversation(env: Env) -> None:
    await env.dc.dispatch("THREAD_CREATE", {
        "id": "250", "guild_id": "100", "parent_id": "200", "owner_id": "900", "type": 11, "name": "tea talk",
        "thread_metadata": {"archived": False, "auto_archive_duration": 1440, "locked": False,
                            "archive_timestamp": "2026-01-01T00:00:00+00:00"},
        "member_count": 1, "message_count": 0, "rate_limit_per_user": 0, "flags": 0, "last_message_id": None,
    })
    env.fa.reply_text("in the thread")
    await env.dc.send_guild_message("no mention needed here", channel_id="250")
    sent = await env.dc.wait_sent(1)
    assert sent[0]["channel_id"] == "250" and sent[0]["content"] == "in the thread"
    conversation = await env.rt.core.repos.conversations.active_for_chat("dc:250")
    assert conversation is not None and conversation.title == "Test #tea talk"
    assert await env.rt.core.repos.conversations.active_for_chat("dc:200") is None


async def test_long_reply_is_split_with_balanced_fences(env: Env) -> None:
    code = "\n".join(f"print('line {i:03d} of the example')" for i in range(90))
    env.fa.reply_text(f"Here is the script:\n\n```python\n{code}\n```\n\nRun it with python.")
    await env.dc.send_dm("write me a script", author_id=ALLOWED)
    sent = await env.dc.wait_sent(2)
    await asyncio.sleep(0.1)
    contents = [m["content"] for m in env.dc.sent_messages]
    assert len(contents) >= 2 and all(len(c) <= 2000 for c in contents)
    for chunk in contents:
        assert sum(1 for line in chunk.splitlines() if line.startswith("```")) % 2 == 0
    assert contents[1].startswith("```python\n")
    joined = "\n".join(contents)
    assert all(f"line {i:03d} " in joined for i in range(90))
    assert "message_reference" in sent[0] and "message_reference" not in sent[1]


async def test_app_commands_registered(env: Env) -> None:
    commands = {c["name"]: c for c in env.dc.registered_commands}
    assert {"memory", "new", "compact", "status", "undo", "incognito"} <= commands.keys()
    memory = commands["memory"]
    assert [o["name"] for o in memory["options"]] == ["emerge", "summarize", "show", "history", "why", "approve",
                                                     "reject"]
    assert [c["value"] for c in commands["incognito"]["options"][0]["choices"]] == ["on", "off"]
    show = next(o for o in memory["options"] if o["name"] == "show")
    which = show["options"][0]
    assert which["name"] == "which" and not which.get("required", False)
    assert [c["value"] for c in which["choices"]] == ["profile", "memory", "today"]


async def test_memory_emerge_refused_for_non_admin(env: Env) -> None:
    await env.dc.send_slash_command("memory", subcommand="emerge", user_id=ALLOWED)
    assert (await env.dc.wait_interaction_responses(1))[0]["type"] == 5  # deferred
    followup = (await env.dc.wait_followups(1))[0]
    assert followup["content"] == env.text("not_admin")
    assert env.fa.messages_requests() == []


async def test_memory_emerge_by_admin_updates_memory(env: Env) -> None:
    await env.rt.core.workspace.write(1, "memory/2026-04-01.md", "# 2026-04-01\n\n- likes green tea\n")
    env.fa.reply_text(json.dumps({"should_update": True, "reason": "added the tea preference",
                                  "memory_content": "# Memory\n- likes green tea\n"}))
    await env.dc.send_slash_command("memory", subcommand="emerge", user_id=ADMIN, in_dm=True)
    followup = (await env.dc.wait_followups(1))[0]
    assert followup["content"] == env.text("emerge_updated", reason="added the tea preference")
    content, _ = await env.rt.core.workspace.read_text(1, MEMORY_FILE)
    assert content == "# Memory\n- likes green tea\n"


async def test_memory_show_is_ephemeral(env: Env) -> None:
    await env.dc.send_slash_command(
        "memory", subcommand="show", options=[{"name": "which", "type": 3, "value": "profile"}],
        user_id=ADMIN, in_dm=True,
    )
    assert (await env.dc.wait_interaction_responses(1))[0]["data"]["flags"] & 64
    followup = (await env.dc.wait_followups(1))[0]
    assert followup["flags"] & 64 and followup["content"]
    assert followup["content"] != env.text("direct_only")


async def test_status_command(env: Env) -> None:
    await env.dc.send_slash_command("status")
    followup = (await env.dc.wait_followups(1))[0]
    assert followup["content"].startswith("Agent ") and "tokens" in followup["content"]
    assert env.fa.messages_requests() == []


async def test_gateway_drop_resumes_and_keeps_answering(env: Env) -> None:
    env.fa.reply_text("before")
    await env.dc.send_guild_message("one", mention_bot=True)
    await env.dc.wait_sent(1)
    await env.dc.drop_gateway()
    await env.dc.wait_for(lambda: len(env.dc.resumes) >= 1)
    env.fa.reply_text("after")
    await env.dc.send_guild_message("two", mention_bot=True)
    sent = await env.dc.wait_sent(2)
    assert sent[1]["content"] == "after"
    assert len(env.dc.identifies) == 1  # resumed, not a new session


async def test_send_and_typing_for_outbound_messages(env: Env) -> None:
    await env.channel.typing("200")
    await env.channel.send(OutboundMessage(channel="discord", chat_id="200", text="x" * 2500))
    sent = await env.dc.wait_sent(2)
    assert [len(m["content"]) for m in sent] == [2000, 500]
    assert env.dc.typing_calls == ["200"]


async def test_message_id_is_the_external_id_and_stored_is_passed(env: Env) -> None:
    env.fa.reply_text("noted")
    incoming = await env.dc.send_guild_message("remember this", mention_bot=True)
    await env.dc.wait_sent(1)
    (inbound,) = env.handler.inbound
    assert inbound.external_id == incoming["id"]
    assert env.handler.stored_callbacks[0] is not None


async def test_slash_command_external_id_is_the_interaction_id(env: Env) -> None:
    interaction = await env.dc.send_slash_command("status")
    await env.dc.wait_followups(1)
    (inbound,) = env.handler.inbound
    assert inbound.text == "/status" and inbound.external_id == interaction["id"]
    assert env.handler.stored_callbacks[0] is not None


async def test_message_delivered_twice_is_answered_once(env: Env) -> None:
    env.fa.reply_text("only once")
    first = await env.dc.send_guild_message("are you there?", mention_bot=True)
    await env.dc.wait_sent(1)
    await env.dc.send_guild_message("are you there?", mention_bot=True, message_id=first["id"])
    env.fa.reply_text("next")
    await env.dc.send_guild_message("and now?", mention_bot=True)
    await env.dc.wait_sent(2)
    await asyncio.sleep(0.1)
    assert [m["content"] for m in env.dc.sent_messages] == ["only once", "next"]
    assert len(env.fa.messages_requests()) == 2


def _message(content: str, *, guild_id: str, channel_id: str, author_id: str = "") -> dict[str, Any]:
    author = {"id": author_id or ALLOWED, "username": "alice", "discriminator": "0", "global_name": "alice",
              "avatar": None, "bot": False, "public_flags": 0}
    bot = {"id": "900", "username": "mate", "discriminator": "0", "global_name": "mate", "avatar": None,
           "bot": True, "public_flags": 0}
    return {
        "id": "1300000000000000000", "channel_id": channel_id, "guild_id": guild_id, "author": author,
        "member": {"roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "deaf": False, "mute": False},
        "content": content, "timestamp": "2026-01-01T00:00:00+00:00", "edited_timestamp": None, "tts": False,
        "mention_everyone": False, "mentions": [bot], "mention_roles": [], "attachments": [], "embeds": [],
        "components": [], "pinned": False, "type": 0, "flags": 0,
    }
