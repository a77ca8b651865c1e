"""One access policy for every channel: its decision table, and the router and both adapters
following it through real code paths (SPEC S13, S31)."""

from __future__ import annotations

import ast
import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from pathlib import Path

import discord
import pytest

from bot.conversation.access import Access, AccessPolicies, ChatKind, Decision, Verdict, is_addressed
from bot.core.config import ChannelsConfig, parse_config
from bot.llm import AnthropicClient
from bot.conversation.router import RoutedReply
from bot.app.runtime import Runtime, open_runtime
from channels.base import InboundMessage
from channels.discord.adapter import DiscordChannel
from channels.telegram.adapter import TelegramChannel
from tests.support.eventually import eventually
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.discord import FakeDiscord
from tests.support.fakes.telegram import FakeTelegram

ADMIN, FRIEND, STRANGER = "7", "42", "555"
SENDERS = (ADMIN, FRIEND, STRANGER)
LISTED, UNLISTED = "-100", "-200"  # the group (Telegram) or server (Discord) ids of the table
MODEL_ANSWER = "an answer from the model"

ANSWER, IGNORE = "answer", "ignore"
NOT_ALLOWED, GROUP_NOT_ALLOWED, SERVER_NOT_ALLOWED = "not_allowed", "group_not_allowed", "server_not_allowed"
ALL_ANSWER = (ANSWER, ANSWER, ANSWER)
ALL_IGNORE = (IGNORE, IGNORE, IGNORE)
ALLOWLIST_DM = (ANSWER, ANSWER, NOT_ALLOWED)

# channel, chat kind, policy: what the bot does for (admin, allowed user, stranger) when it is
# addressed (mentioned, replied to, commanded), then when it is not.
TABLE: list[tuple[str, str, str, tuple[str, ...], tuple[str, ...]]] = [
    # A direct chat answers to the allowlist alone; a mention changes nothing.
    ("telegram", "direct", "allowlist", ALLOWLIST_DM, ALLOWLIST_DM),
    ("telegram", "direct", "open", ALL_ANSWER, ALL_ANSWER),
    ("discord", "direct", "allowlist", ALLOWLIST_DM, ALLOWLIST_DM),
    ("discord", "direct", "open", ALL_ANSWER, ALL_ANSWER),
    ("console", "direct", "none", ALL_ANSWER, ALL_ANSWER),
    ("web", "direct", "none", ALL_ANSWER, ALL_ANSWER),
    # A group answers to the place rule first, then to the mention rule.
    ("telegram", "group", "open", ALL_ANSWER, ALL_IGNORE),
    ("telegram", "group", "open, any message", ALL_ANSWER, ALL_ANSWER),
    ("telegram", "group", "allowlist, listed", ALL_ANSWER, ALL_IGNORE),
    ("telegram", "group", "allowlist, not listed", (GROUP_NOT_ALLOWED, IGNORE, IGNORE), ALL_IGNORE),
    ("telegram", "group", "allowlist, not listed, any message", (GROUP_NOT_ALLOWED, IGNORE, IGNORE), ALL_IGNORE),
    ("telegram", "group", "disabled", ALL_IGNORE, ALL_IGNORE),
    ("discord", "group", "open", ALL_ANSWER, ALL_IGNORE),
    ("discord", "group", "open, any message", ALL_ANSWER, ALL_ANSWER),
    ("discord", "group", "allowlist, listed", ALL_ANSWER, ALL_IGNORE),
    ("discord", "group", "allowlist, not listed", (SERVER_NOT_ALLOWED, IGNORE, IGNORE), ALL_IGNORE),
    ("console", "group", "none", ALL_ANSWER, ALL_ANSWER),
    ("web", "group", "none", ALL_ANSWER, ALL_ANSWER),
]

# Whether each sender is an admin: (admin, allowed user, stranger).
ADMINS = [
    ("telegram", (True, False, False)),
    ("discord", (True, False, False)),
    ("console", (True, True, True)),  # whoever is at the keyboard is the owner
    ("web", (True, True, True)),  # whoever holds the API token is the owner
    ("cron", (False, False, False)),  # unless the job says so
]


def channels_config(channel: str, kind: str, policy: str) -> dict[str, Any]:
    """The channels section (kebab-case, as in config.yaml) that sets up one row of the table."""
    if channel not in ("telegram", "discord"):
        return {}
    section: dict[str, Any] = {"admins": [ADMIN], "allowed-users": [FRIEND]}
    if kind == "direct":
        section["dm-policy"] = policy
    else:
        places = "group" if channel == "telegram" else "guild"
        section[f"{places}-policy"] = policy.split(",")[0]
        section[f"allowed-{places}s"] = [LISTED]
        section["require-mention"] = "any message" not in policy
    return {channel: section}


def place(policy: str) -> str:
    return UNLISTED if "not listed" in policy else LISTED


def outcome(decision: Decision) -> str:
    return decision.refusal if decision.verdict is Verdict.REFUSE else decision.verdict.value


def table_cases() -> list[Any]:
    cases = []
    for channel, kind, policy, addressed, unaddressed in TABLE:
        for spoken_to, expected in ((True, addressed), (False, unaddressed)):
            for sender, want in zip(SENDERS, expected, strict=True):
                name = f"{channel}-{kind}-{policy}-{'addressed' if spoken_to else 'unaddressed'}-{sender}"
                cases.append(pytest.param(channel, kind, policy, sender, spoken_to, want, id=name))
    return cases


def policies(channels: dict[str, Any]) -> AccessPolicies:
    parsed: ChannelsConfig = parse_config({"mate": {"channels": channels}}, environ={}).mate.channels
    return AccessPolicies.from_config(parsed)


@pytest.mark.parametrize(("channel", "kind", "policy", "sender", "addressed", "expected"), table_cases())
def test_the_policy_decides_as_the_table_says(
    channel: str, kind: str, policy: str, sender: str, addressed: bool, expected: str,
) -> None:
    rules = policies(channels_config(channel, kind, policy)).for_channel(channel)
    access = Access(ChatKind(kind), sender, place_id=None if kind == "direct" else place(policy), addressed=addressed)

    decision = rules.decide(access)

    assert outcome(decision) == expected
    assert decision.is_admin == (sender == ADMIN or channel in ("console", "web"))
    if decision.refuses:  # the line names the id the owner has to allow
        id_name = {NOT_ALLOWED: "user_id", GROUP_NOT_ALLOWED: "chat_id", SERVER_NOT_ALLOWED: "guild_id"}[expected]
        assert decision.values == ((id_name, sender if expected == NOT_ALLOWED else UNLISTED),)


@pytest.mark.parametrize(("channel", "expected"), ADMINS)
def test_admins_are_the_configured_ones_or_the_owner(channel: str, expected: tuple[bool, ...]) -> None:
    rules = policies({"telegram": {"admins": [ADMIN]}, "discord": {"admins": [ADMIN]}}).for_channel(channel)
    assert tuple(rules.is_admin(sender) for sender in SENDERS) == expected
    # A flag the caller sets counts only for callers inside the daemon (cron), never for a chat platform.
    assert rules.is_admin(STRANGER, vouched=True) == (channel in ("console", "web", "cron"))


@pytest.mark.parametrize(("text", "mentioned", "addressed"), [
    ("hello there", True, True),  # @mentioned, replied to, or its own thread: the adapter says
    ("/status", False, True),
    ("/status@mate_bot now", False, True),
    ("  /help", False, True),
    ("hello there", False, False),
    ("/etc/hosts is empty, why?", False, False),  # a question that starts with "/", not a command
    ("", False, False),
])
def test_the_bot_is_addressed_by_a_mention_or_one_of_its_commands(text: str, mentioned: bool, addressed: bool) -> None:
    message = InboundMessage("telegram", "-100", FRIEND, "Alice", text, is_direct=False, mentions_bot=mentioned)
    assert is_addressed(message) is addressed
    rules = policies({"telegram": {"group-policy": "open", "require-mention": True}}).telegram
    assert rules.decide(rules.access_of(message)).answers is addressed


def test_a_message_is_read_with_the_place_it_carries_or_its_chat_where_that_is_the_place() -> None:
    rules = policies({"telegram": {"group-policy": "allowlist", "allowed-groups": [LISTED]},
                      "discord": {"dm-policy": "open", "guild-policy": "allowlist", "allowed-guilds": [LISTED]}})
    telegram = InboundMessage("telegram", LISTED, FRIEND, "Alice", "/help", is_direct=False)
    assert rules.telegram.decide(rules.telegram.access_of(telegram)).answers  # the group is its own place
    discord_message = InboundMessage("discord", "200", FRIEND, "Alice", "/help", is_direct=False)
    for server, answers in ((LISTED, True), (UNLISTED, False)):
        access = rules.discord.access_of(replace(discord_message, place_id=server))
        assert rules.discord.decide(access).answers is answers
    # A direct chat has no place, whatever a caller put there.
    direct = InboundMessage("discord", FRIEND, FRIEND, "Alice", "hi", place_id=UNLISTED)
    assert rules.discord.decide(rules.discord.access_of(direct)).answers


def _calls_and_reads(path: Path) -> tuple[int, set[str], set[str]]:
    """In one module: how many times `Access(...)` is called, the attributes read off anything,
    and the keyword arguments passed to any call."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    made = sum(1 for node in ast.walk(tree) if isinstance(node, ast.Call)
               and isinstance(node.func, ast.Name) and node.func.id == "Access")
    reads = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
             and isinstance(node.ctx, ast.Load)}
    keywords = {kw.arg for node in ast.walk(tree) if isinstance(node, ast.Call) for kw in node.keywords
                if kw.arg is not None}
    return made, reads, keywords


def test_access_is_made_in_one_module_and_addressed_decided_in_one_place() -> None:
    """SPEC S35: the Access input is built in one place (AccessPolicy.access_of) from what the
    adapter filled in; "is the bot addressed" is decided by is_addressed alone; nothing else
    reads an Access's or the adapter's raw signal."""
    root = Path(__file__).resolve().parents[2]
    modules = [path for package in ("bot", "channels", "memory") for path in (root / package).rglob("*.py")]
    assert len(modules) > 50
    builders, deciders = set(), set()
    for path in modules:
        made, reads, keywords = _calls_and_reads(path)
        name = path.relative_to(root).as_posix()
        if made:
            builders.add(name)
        # Who sets or reads `addressed`, or reads the adapter's `mentions_bot` (it only fills it).
        if {"addressed", "vouched_admin"} & (keywords | reads) or "mentions_bot" in reads:
            deciders.add(name)
    assert builders == {"bot/conversation/access.py"}
    assert deciders == {"bot/conversation/access.py"}


def test_a_group_without_its_place_is_not_admitted_where_the_chat_is_the_place() -> None:
    rules = policies({"telegram": {"group-policy": "allowlist", "allowed-groups": [LISTED], "admins": [ADMIN]}})
    assert rules.telegram.decide(Access(ChatKind.GROUP, ADMIN, None, addressed=True)).verdict is Verdict.IGNORE
    # Discord's router-side check: the adapter admitted the server, which the message does not carry.
    rules = policies({"discord": {"guild-policy": "allowlist", "allowed-guilds": [LISTED]}})
    assert rules.discord.decide(Access(ChatKind.GROUP, ADMIN, None, addressed=True)).answers


# -- the router -------------------------------------------------------------------------------


def classify(reply: RoutedReply | None, message: InboundMessage, rt: Runtime, guild: str) -> str:
    if reply is None:
        return IGNORE
    text = rt.core.prompts.text
    refusals = {
        NOT_ALLOWED: text("not_allowed", user_id=message.sender_id),
        GROUP_NOT_ALLOWED: text("group_not_allowed", chat_id=message.chat_id),
        SERVER_NOT_ALLOWED: text("server_not_allowed", guild_id=guild),
    }
    for name, line in refusals.items():
        if reply.text == line:
            return name
    assert reply.failure == ""
    return ANSWER


def router_rows() -> list[Any]:
    return [pytest.param(*row, id=f"{row[0]}-{row[1]}-{row[2]}") for row in TABLE]


@pytest.mark.parametrize(("channel", "kind", "policy", "addressed", "unaddressed"), router_rows())
async def test_the_router_answers_as_the_table_says(
    tmp_path: Path, channel: str, kind: str, policy: str, addressed: tuple[str, ...], unaddressed: tuple[str, ...],
) -> None:
    chat = place(policy) if channel == "telegram" else "200"  # a Discord chat is a channel of the server
    async with FakeAnthropic(default_text=MODEL_ANSWER) as fake:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
                             channels=channels_config(channel, kind, policy))
        async with AnthropicClient(config.mate.llm) as llm, \
                open_runtime(config, llm=llm, with_memory_worker=False) as rt:
            seen: dict[tuple[str, str], str] = {}
            for (form, text, mentioned), sender in itertools.product(
                    (("mention", "hello there", True), ("command", "/help", False), ("none", "hello there", False)),
                    SENDERS):
                # A group's message carries its place, as the adapters fill it (a Discord server).
                message = InboundMessage(channel, sender if kind == "direct" else chat, sender, f"name-{sender}",
                                         text, is_direct=kind == "direct", mentions_bot=mentioned,
                                         place_id=None if kind == "direct" else place(policy))
                reply = await rt.router.handle(message)
                seen[form, sender] = classify(reply, message, rt, place(policy))
                if seen[form, sender] == ANSWER and form == "mention":
                    assert reply is not None and reply.text == MODEL_ANSWER
                assert rt.router.is_admin(message) == (sender == ADMIN or channel in ("console", "web"))

    for form, expected in (("mention", addressed), ("command", addressed), ("none", unaddressed)):
        assert tuple(seen[form, sender] for sender in SENDERS) == expected, form
    if set(addressed + unaddressed) != {ANSWER}:  # what is ignored or refused never reaches the model
        answered = sum(1 for (form, _), got in seen.items() if got == ANSWER and form != "command")
        assert len(fake.messages_requests()) == answered


# -- the Telegram adapter: messages it cannot read (stickers) ---------------------------------

TG_ADMIN, TG_FRIEND, TG_STRANGER = int(ADMIN), int(FRIEND), int(STRANGER)
_message_ids = itertools.count(50_000)


def push_sticker(tg: FakeTelegram, *, chat_id: int, user_id: int, reply_to_bot: bool = False) -> int:
    """A sticker (optionally answering one of the bot's messages); its update id."""
    chat: dict[str, Any] = ({"id": chat_id, "type": "private", "first_name": "Alice"} if chat_id > 0
                            else {"id": chat_id, "type": "group", "title": "Team"})
    message: dict[str, Any] = {
        "message_id": next(_message_ids), "date": int(time.time()), "chat": chat,
        "from": {"id": user_id, "is_bot": False, "first_name": "Alice"},
        "sticker": {"file_id": "sticker", "file_unique_id": "sticker-u", "type": "regular", "width": 512,
                    "height": 512, "is_animated": False, "is_video": False, "emoji": "👍"},
    }
    if reply_to_bot:
        message["reply_to_message"] = {"message_id": next(_message_ids), "date": int(time.time()), "chat": chat,
                                       "from": tg.bot_user, "text": "earlier reply"}
    update: dict[str, Any] = {"message": message}
    tg.push_update(update)
    return int(update["update_id"])


# group-policy, require-mention, then per sticker: (chat, sender, replying to the bot, what is sent)
STICKERS: dict[str, tuple[dict[str, Any], list[tuple[int, int, bool, str | None]]]] = {
    "allowlists": ({"dm-policy": "allowlist", "group-policy": "allowlist", "allowed-groups": [LISTED, "-101"]}, [
        (TG_ADMIN, TG_ADMIN, False, "text_only"),
        (TG_FRIEND, TG_FRIEND, False, "text_only"),
        (TG_STRANGER, TG_STRANGER, False, NOT_ALLOWED),
        (int(LISTED), TG_STRANGER, True, "text_only"),
        (-101, TG_FRIEND, False, None),  # not addressed
        (int(UNLISTED), TG_ADMIN, True, None),  # a sticker never earns the group's id line
    ]),
    "open": ({"dm-policy": "open", "group-policy": "open"}, [
        (TG_STRANGER, TG_STRANGER, False, "text_only"),
        (-300, TG_STRANGER, True, "text_only"),
        (-301, TG_STRANGER, False, None),
    ]),
    "open, any message": ({"group-policy": "open", "require-mention": False}, [
        (-400, TG_FRIEND, False, None),  # a sticker is answered only where the bot is addressed
        (-401, TG_FRIEND, True, "text_only"),
    ]),
    "disabled": ({"group-policy": "disabled"}, [
        (-500, TG_ADMIN, True, None),
    ]),
}


@pytest.mark.parametrize("setup", list(STICKERS))
async def test_the_telegram_adapter_answers_stickers_as_the_policy_says(tmp_path: Path, setup: str) -> None:
    section, stickers = STICKERS[setup]
    async with FakeAnthropic() as fake_llm, FakeTelegram() as tg:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake_llm.url, "max-retries": 0},
                             channels={"telegram": {"enabled": True, "token": FakeTelegram.token,
                                                    "base-url": tg.base_url, "admins": [ADMIN],
                                                    "allowed-users": [FRIEND], **section}})
        async with AnthropicClient(config.mate.llm) as llm, \
                open_runtime(config, llm=llm, with_memory_worker=False) as rt:
            channel = TelegramChannel(config.mate.channels.telegram, rt.router.handle, rt.core.prompts,
                                      poll_timeout=0.2, backoff_base=0.05, backoff_max=0.2, busy_poll_interval=0.05)
            task = asyncio.create_task(channel.run())
            try:
                last = max(push_sticker(tg, chat_id=chat, user_id=sender, reply_to_bot=replying)
                           for chat, sender, replying, _ in stickers)
                # A sticker is confirmed once handled, after any answer was sent.
                await eventually(lambda: tg.confirmed_below > last, "every sticker to be confirmed")
            finally:
                await channel.stop()
                await task
            prompts = rt.core.prompts

    for chat, sender, _, expected in stickers:
        sent = [s["text"] for s in tg.sent if int(s["chat_id"]) == chat]
        if expected is None:
            assert sent == [], chat
        else:
            values = {"user_id": str(sender)} if expected == NOT_ALLOWED else {}
            assert sent == [prompts.text(expected, **values)], chat
    assert fake_llm.messages_requests() == []


# -- the Discord adapter: servers, stickers, slash commands ----------------------------------

BOT_ID = "900"


class FastClient(discord.Client):
    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        pass  # discord.py sleeps 5 s before every re-IDENTIFY


def fast_client(**kwargs: Any) -> discord.Client:
    return FastClient(guild_ready_timeout=0.05, **kwargs)


_snowflakes = itertools.count(1_300_000_000_000_000_000)


def discord_message(content: str, *, channel_id: str, author_id: str, guild_id: str | None = None,
                    mention: bool = False, sticker: bool = False) -> dict[str, Any]:
    author = {"id": author_id, "username": "alice", "discriminator": "0", "global_name": "alice", "avatar": None,
              "bot": False, "public_flags": 0}
    bot = {"id": BOT_ID, "username": "mate", "discriminator": "0", "global_name": "mate", "avatar": None,
           "bot": True, "public_flags": 0}
    payload: dict[str, Any] = {
        "id": str(next(_snowflakes)), "channel_id": channel_id, "author": author,
        "content": f"<@{BOT_ID}> {content}" if mention else content, "timestamp": "2026-01-01T00:00:00+00:00",
        "edited_timestamp": None, "tts": False, "mention_everyone": False, "mentions": [bot] if mention else [],
        "mention_roles": [], "attachments": [], "embeds": [], "components": [], "pinned": False, "type": 0,
        "flags": 0,
    }
    if guild_id is not None:
        payload["guild_id"] = guild_id
        payload["member"] = {"roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "deaf": False, "mute": False}
    if sticker:
        payload["sticker_items"] = [{"id": "1", "name": "wave", "format_type": 1}]
    return payload


@asynccontextmanager
async def discord_running(tmp_path: Path, section: dict[str, Any]) -> AsyncIterator[tuple[FakeDiscord, Runtime]]:
    async with FakeAnthropic() as fa, FakeDiscord() as dc:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fa.url, "max-retries": 0, "stream": False},
                             channels={"discord": {"enabled": True, "token": "TOKEN", "admins": [ADMIN],
                                                   "allowed-users": [FRIEND], "api-base-url": dc.api_base,
                                                   "gateway-url": dc.gateway_url, **section}})
        async with open_runtime(config, with_memory_worker=False) as rt:
            channel = DiscordChannel(config.mate.channels.discord, rt.router.handle, rt.core.prompts,
                                     client_factory=fast_client)
            task = asyncio.create_task(channel.run(), name="discord")
            try:
                await dc.wait_ready()
                assert channel.client is not None
                await asyncio.wait_for(channel.client.wait_until_ready(), 30)
                yield dc, rt
            finally:
                await channel.stop()
                await asyncio.wait_for(task, 30)
        assert fa.messages_requests() == []


async def test_the_discord_adapter_admits_servers_and_answers_stickers_as_the_policy_says(tmp_path: Path) -> None:
    # (channel, payload, what is sent there): the fake's own server "100" is allowed, "999" is not.
    cases: list[tuple[str, dict[str, Any], str | None]] = [
        ("990", discord_message("hello", channel_id="990", guild_id="999", author_id=ADMIN, mention=True),
         SERVER_NOT_ALLOWED),
        ("991", discord_message("/status", channel_id="991", guild_id="999", author_id=ADMIN), SERVER_NOT_ALLOWED),
        ("992", discord_message("hello", channel_id="992", guild_id="999", author_id=ADMIN), None),
        ("993", discord_message("hello", channel_id="993", guild_id="999", author_id=STRANGER, mention=True), None),
        # A sticker in a direct chat: the notice for the allowlisted, silence (not the id line) for a stranger.
        ("310", discord_message("", channel_id="310", author_id=STRANGER, sticker=True), None),
        ("311", discord_message("", channel_id="311", author_id=FRIEND, sticker=True), "text_only"),
        ("200", discord_message("", channel_id="200", guild_id="100", author_id=STRANGER, mention=True, sticker=True),
         "text_only"),
        ("201", discord_message("", channel_id="201", guild_id="100", author_id=FRIEND, sticker=True), None),
        # Last, and answered: every message above was handled once this one is (events run in order).
        ("312", discord_message("", channel_id="312", author_id=ADMIN, sticker=True), "text_only"),
    ]
    async with discord_running(tmp_path, {"allowed-guilds": ["100"]}) as (dc, rt):
        for _, payload, _ in cases:
            await dc.dispatch("MESSAGE_CREATE", payload)
        await dc.wait_for(lambda: any(m["channel_id"] == "312" for m in dc.sent_messages), timeout=30)
        await dc.wait_for("sent_messages", count=sum(1 for *_, want in cases if want), timeout=30)
        text = rt.core.prompts.text

    for channel_id, _, expected in cases:
        sent = [m["content"] for m in dc.sent_messages if m["channel_id"] == channel_id]
        if expected is None:
            assert sent == [], channel_id
        else:
            assert sent == [text(expected, guild_id="999") if expected == SERVER_NOT_ALLOWED else text(expected)]


async def test_a_server_not_allowed_gets_no_slash_command_answers_and_counts_every_message_when_any_is_answered(
    tmp_path: Path,
) -> None:
    async with discord_running(tmp_path, {"allowed-guilds": ["555"], "require-mention": False}) as (dc, rt):
        await dc.send_slash_command("status", user_id=ADMIN)
        # Where every message is answered, every message of the owner's is addressed to the bot.
        await dc.dispatch("MESSAGE_CREATE", discord_message("hi", channel_id="200", guild_id="100", author_id=ADMIN))
        await dc.dispatch("MESSAGE_CREATE", discord_message("hi", channel_id="200", guild_id="100",
                                                            author_id=STRANGER))
        await dc.send_slash_command("status", user_id=ADMIN, in_dm=True)
        await dc.wait_followups(1, timeout=30)
        await dc.wait_sent(1, timeout=30)
        line = rt.core.prompts.text("server_not_allowed", guild_id="100")

    assert [m["content"] for m in dc.sent_messages] == [line]
    # Only the direct chat's command was acknowledged: the server's got no answer at all.
    assert len(dc.interaction_responses) == 1 and len(dc.followups) == 1
