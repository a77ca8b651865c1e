"""AccessPolicy: whether a message is answered, refused with an id line, or ignored, in every channel (SPEC S13).

The one place a message becomes the `Access` the rules read (AccessPolicy.access_of) and the one
rule for whether the bot is addressed (is_addressed): adapters, the router and reminders all ask here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, Protocol

from bot.conversation.commands.names import command_name
from bot.core.config import ChannelsConfig, DiscordConfig, TelegramConfig
from channels.base import InboundMessage


class ChatKind(StrEnum):
    DIRECT = "direct"
    GROUP = "group"  # a Telegram group, or a channel of a Discord server


class Verdict(StrEnum):
    ANSWER = "answer"
    REFUSE = "refuse"  # one line that names the id to allow (Decision.refusal)
    IGNORE = "ignore"  # silence: it costs nothing and tells a stranger nothing


class PromptText(Protocol):
    """Where the refusal line's words come from (the PromptLibrary)."""

    def text(self, key: str, **variables: object) -> str: ...


def is_addressed(message: InboundMessage) -> bool:
    """The bot is mentioned, replied to or in its own thread (what the adapter saw: `mentions_bot`),
    or given one of its commands."""
    return message.mentions_bot or command_name(message.text) is not None


@dataclass(frozen=True, slots=True)
class Access:
    """One message as the access rules see it; made by AccessPolicy.access_of alone."""

    kind: ChatKind
    sender_id: str
    # The group (Telegram) or server (Discord) of a group chat. None: not known (a Discord
    # message read back at start-up, a reminder made before version 15), which a Discord
    # server rule admits and a Telegram group rule does not.
    place_id: str | None = None
    addressed: bool = False  # the bot is mentioned, replied to or given a command
    vouched_admin: bool = False  # an in-process caller (cron) says whether the sender is an admin


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one message, and who sent it."""

    verdict: Verdict
    is_admin: bool = False
    refusal: str = ""  # the strings key of the refusal line (REFUSE only)
    values: tuple[tuple[str, str], ...] = ()  # its placeholders

    @property
    def answers(self) -> bool:
        return self.verdict is Verdict.ANSWER

    @property
    def refuses(self) -> bool:
        return self.verdict is Verdict.REFUSE

    def refusal_line(self, prompts: PromptText) -> str:
        return prompts.text(self.refusal, **dict(self.values))


@dataclass(frozen=True, slots=True)
class PlaceRule:
    """Which groups (Telegram) or servers (Discord) the bot works in."""

    policy: Literal["open", "allowlist", "disabled"] = "open"
    allowed: frozenset[str] = frozenset()
    refusal: str = ""  # the strings key that tells an admin the id to allow
    id_name: str = ""  # its placeholder
    # Discord: where every message is answered, every message of an admin's in a server not
    # allowed earns the line, not only one addressed to the bot.
    tell_unaddressed: bool = False


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """One channel's rules: the direct-chat allowlist, its groups or servers, the mention rule, its admins.

    Rules are checked in one order: a direct chat answers to the allowlist alone; a group
    first to the place rule, then to the mention rule.
    """

    channel: str
    admins: frozenset[str] = frozenset()
    allowed_users: frozenset[str] = frozenset()
    dm_policy: Literal["allowlist", "open"] = "open"
    places: PlaceRule = PlaceRule()
    require_mention: bool = False
    # Telegram: a group chat is its own place. Discord: a channel's server is not in its id.
    place_is_chat: bool = False
    everyone_is_admin: bool = False  # console and web: the person at the keyboard or with the token
    trusts_caller: bool = False  # in-process callers (cron) say themselves whether the sender is an admin

    @classmethod
    def telegram(cls, config: TelegramConfig) -> AccessPolicy:
        return cls(
            "telegram", frozenset(config.admins), frozenset(config.allowed_users), config.dm_policy,
            PlaceRule(config.group_policy, frozenset(config.allowed_groups), "group_not_allowed", "chat_id"),
            config.require_mention, place_is_chat=True,
        )

    @classmethod
    def discord(cls, config: DiscordConfig) -> AccessPolicy:
        return cls(
            "discord", frozenset(config.admins), frozenset(config.allowed_users), config.dm_policy,
            PlaceRule(config.guild_policy, frozenset(config.allowed_guilds), "server_not_allowed", "guild_id",
                      tell_unaddressed=True),
            config.require_mention,
        )

    @classmethod
    def owner(cls, channel: str) -> AccessPolicy:
        """Console and web: whoever reaches them is the owner (S13)."""
        return cls(channel, everyone_is_admin=True)

    @classmethod
    def in_process(cls, channel: str) -> AccessPolicy:
        """Cron jobs and other callers inside the daemon: always answered."""
        return cls(channel, trusts_caller=True)

    def access_of(self, message: InboundMessage) -> Access:
        """The message as these rules read it: the one place an Access is made."""
        if message.is_direct:
            return Access(ChatKind.DIRECT, message.sender_id, addressed=is_addressed(message),
                          vouched_admin=message.is_admin)
        # A message the adapter did not fill (a reminder made before places were kept, a test's):
        # a Telegram group is its own place; a Discord channel's server is not in its id.
        place = message.place_id or (message.chat_id if self.place_is_chat else None)
        return Access(ChatKind.GROUP, message.sender_id, place_id=place, addressed=is_addressed(message),
                      vouched_admin=message.is_admin)

    def is_admin(self, sender_id: str, *, vouched: bool = False) -> bool:
        return self.everyone_is_admin or sender_id in self.admins or (self.trusts_caller and vouched)

    def is_listed(self, sender_id: str) -> bool:
        """An admin, or on the direct-chat allowlist."""
        return sender_id in self.admins or sender_id in self.allowed_users

    def is_owners(self) -> bool:
        """Console and web: whoever reaches them is the owner."""
        return self.everyone_is_admin

    def wants_answer(self, access: Access) -> bool:
        """The message asks for an answer: a direct chat, the bot addressed, or a group where every
        message is answered (so a typing indicator is honest)."""
        return access.kind is ChatKind.DIRECT or access.addressed or not self.require_mention

    def decide(self, access: Access) -> Decision:
        admin = self.is_admin(access.sender_id, vouched=access.vouched_admin)
        if access.kind is ChatKind.DIRECT:
            if self.dm_policy == "allowlist" and not self.is_listed(access.sender_id):
                return Decision(Verdict.REFUSE, admin, "not_allowed", (("user_id", access.sender_id),))
            return Decision(Verdict.ANSWER, admin)
        place = self.decide_place(access)
        if not place.answers:
            return place
        if self.require_mention and not access.addressed:
            return Decision(Verdict.IGNORE, admin)
        return place

    def decide_place(self, access: Access) -> Decision:
        """The group or server rule alone, for an adapter that admits a place before the router sees it."""
        admin = self.is_admin(access.sender_id, vouched=access.vouched_admin)
        rule, place = self.places, access.place_id
        # No place where the chat's id is the place would be a caller's slip: it is not admitted.
        admitted_elsewhere = place is None and not self.place_is_chat
        if access.kind is ChatKind.DIRECT or rule.policy == "open" or admitted_elsewhere:
            return Decision(Verdict.ANSWER, admin)
        if rule.policy == "disabled" or place is None:
            return Decision(Verdict.IGNORE, admin)
        if place in rule.allowed:
            return Decision(Verdict.ANSWER, admin)
        # Only the owner learns how to allow it; anyone else gets silence and costs nothing.
        told = access.addressed or (rule.tell_unaddressed and not self.require_mention)
        if admin and told:
            return Decision(Verdict.REFUSE, admin, rule.refusal, ((rule.id_name, place),))
        return Decision(Verdict.IGNORE, admin)


@dataclass(frozen=True, slots=True)
class AccessPolicies:
    """The policy of every channel, built once from the configuration."""

    telegram: AccessPolicy
    discord: AccessPolicy
    console: AccessPolicy = AccessPolicy.owner("console")
    web: AccessPolicy = AccessPolicy.owner("web")

    @classmethod
    def from_config(cls, channels: ChannelsConfig) -> AccessPolicies:
        return cls(AccessPolicy.telegram(channels.telegram), AccessPolicy.discord(channels.discord))

    def for_channel(self, channel: str) -> AccessPolicy:
        known = {"telegram": self.telegram, "discord": self.discord, "console": self.console, "web": self.web}
        return known.get(channel) or AccessPolicy.in_process(channel)

    def admin_accounts(self) -> list[tuple[str, str]]:
        """(channel, sender id) of every admin the chat channels name: the owner's accounts."""
        return [(policy.channel, admin) for policy in (self.telegram, self.discord) for admin in sorted(policy.admins)]
