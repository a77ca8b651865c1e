"""The channel port and the messages that cross it, free of SDK objects."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A text message from a chat, already converted at the adapter's edge (SPEC S4)."""

    channel: str  # telegram | discord | console | web
    chat_id: str
    sender_id: str
    sender_name: str
    text: str
    is_direct: bool = True
    # The bot is @mentioned, replied to, or it is the bot's own thread (a command counts too,
    # but bot.conversation.access.is_addressed alone decides that).
    mentions_bot: bool = False
    thread_id: str | None = None
    chat_title: str = ""
    is_admin: bool = False  # decided by the adapter from its channel's `admins`
    trigger_source: str = "channel"  # web | channel | console | cron
    # The platform's id of the message (Telegram message_id, Discord snowflake): a message
    # delivered twice (after a crash, before its update was confirmed) is answered once.
    external_id: str | None = None
    files: tuple[IncomingFile, ...] = ()  # photos and documents; `text` is then their caption
    # A group chat's place, as access rules admit it: the Telegram group, the Discord server.
    # None in a direct chat, or where the sender does not know it.
    place_id: str | None = None


@dataclass(frozen=True, slots=True)
class IncomingFile:
    """A photo, file or voice note attached to a message; `read` fetches its bytes (only once it is
    clear the message is answered and the size is within limits)."""

    filename: str
    media_type: str  # as the platform reports it ("" when unknown); the content decides
    size: int  # bytes, as the platform reports it (0 when unknown)
    read: Callable[[], Awaitable[bytes]]
    is_photo: bool = False  # Telegram photos have no name: they are images whatever it says
    is_voice: bool = False  # a voice note, an audio file or a round video message: its words are wanted
    duration: float | None = None  # seconds, where the platform tells it (voice notes, audio)


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    channel: str
    chat_id: str
    text: str
    thread_id: str | None = None


@dataclass(frozen=True, slots=True)
class RoutedReply:
    """The router's answer to an inbound message: what to send back, and where it belongs."""

    text: str
    conversation_id: str
    agent_id: int
    # "llm" | "busy" | "storage": the text is an apology (the web API answers 502 for "llm", else 503)
    failure: str = ""
    answered: bool = False  # the text is the model's answer, stored in the conversation


Stored = Callable[[], None]


class ReplyStream(Protocol):
    """What a chat shows while a reply is being written; the final reply is sent as usual.

    Every channel consumes the same calls: Telegram and Discord turn them into a draft or
    an edited message, the web chat into server-sent events, the console into output.
    Both methods return at once; a slow platform must not hold up the model's stream.
    """

    def text(self, delta: str) -> None:
        """The next piece of the answer's text."""

    def status(self, line: str) -> None:
        """The text so far is set aside (a tool round follows, or the answer starts over):
        show `line` instead until new text arrives; "" shows nothing new."""


class MessageHandler(Protocol):
    """The router's entry point as adapters see it.

    `stored` is called exactly once, as soon as the message is safely in the database (or
    the router decided it needs no storing: ignored, refused, a command): only then may the
    adapter confirm the platform update, so a crash loses nothing.
    """

    def __call__(
        self, message: InboundMessage, *, stored: Stored | None = None, stream: ReplyStream | None = None,
    ) -> Awaitable[RoutedReply | None]: ...


# A channel's health for /healthz and /status: "ok", "retrying", "standby" (another daemon on the
# database serves this bot; this one takes over should it stop), or "stopped: <reason>".
CHANNEL_OK = "ok"
CHANNEL_RETRYING = "retrying"
CHANNEL_STANDBY = "standby"


class PollingLeases(Protocol):
    """Several daemons on one database: which of them serves a bot (bot/storage/leases.py)."""

    @property
    def renew_every(self) -> float: ...

    def held(self, name: str, lost: asyncio.Event | None = None) -> AbstractAsyncContextManager[bool]: ...


def can_send(state: str) -> bool:
    """Whether a channel in `state` sends messages now: polling, or standing by for another daemon."""
    return state in (CHANNEL_OK, CHANNEL_STANDBY)


def channel_stopped(reason: str) -> str:
    return f"stopped: {reason}"


class ReportsState(Protocol):
    """A channel as /healthz and /status see it."""

    name: str

    @property
    def state(self) -> str: ...


class ChannelStateBoard:
    """The chat channels the daemon runs, read live for /healthz and /status."""

    def __init__(self) -> None:
        self._channels: list[ReportsState] = []

    def add(self, channel: ReportsState) -> None:
        self._channels.append(channel)

    def states(self) -> dict[str, str]:
        return {channel.name: channel.state for channel in self._channels}

    def all_ok(self) -> bool:
        return all(can_send(state) for state in self.states().values())


@runtime_checkable
class Channel(ReportsState, Protocol):
    """What every adapter offers the daemon; inbound messages go to the router's handler instead.

    `run` serves until `stop` (network failures are the adapter's to retry; a fatal one
    returns with `state` stopped); `send` delivers an answer the daemon makes on its own
    (start-up recovery); `state` is read for /healthz and /status.
    """

    async def run(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, message: OutboundMessage) -> None: ...


def conversation_key(message: InboundMessage) -> str:
    """The chat's base conversation id: tg:<chat>[:<thread>], dc:<channel>, console:<user>, web:<client>."""
    if message.channel == "telegram":
        return f"tg:{message.chat_id}" + (f":{message.thread_id}" if message.thread_id else "")
    if message.channel == "discord":
        return f"dc:{message.thread_id or message.chat_id}"
    if message.channel == "console":
        return f"console:{message.sender_id}"
    if message.channel == "web":
        return f"web:{message.chat_id}"
    return f"{message.channel}:{message.chat_id}"


# A chat's and a conversation's key start with the channel's short form.
_PREFIXES = {"telegram": "tg", "discord": "dc"}
_CHANNELS = {prefix: channel for channel, prefix in _PREFIXES.items()}


def chat_key(message: InboundMessage) -> str:
    """The chat itself, threads and topics included: what a `per-chat` agent is bound to."""
    return f"{_PREFIXES.get(message.channel, message.channel)}:{message.chat_id}"


def parse_chat_key(key: str) -> tuple[str, str]:
    """(channel, chat id) of a key made by chat_key."""
    prefix, _, chat_id = key.partition(":")
    return _CHANNELS.get(prefix, prefix), chat_id


def parse_conversation_key(key: str) -> tuple[str, str, str | None] | None:
    """(channel, chat id, thread id) of a Telegram or Discord conversation id; None for others.

    The inverse of conversation_key, for answers the daemon sends on its own (start-up
    recovery); a `#<n>` suffix from /new is dropped.
    """
    base = key.split("#", 1)[0]
    prefix, _, rest = base.partition(":")
    if prefix == "tg" and rest:
        chat, _, thread = rest.partition(":")
        return "telegram", chat, thread or None
    if prefix == "dc" and rest:
        return "discord", rest, None
    return None


def conversation_target(key: str) -> tuple[str, str, str | None] | None:
    """(channel, chat id, thread id) a conversation's messages go to: Telegram, Discord and
    console conversations; None for web chats (nothing is sent to them on its own)."""
    parsed = parse_conversation_key(key)
    if parsed is not None:
        return parsed
    prefix, _, rest = key.split("#", 1)[0].partition(":")
    return ("console", rest, None) if prefix == "console" and rest else None
