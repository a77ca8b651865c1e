"""The channel port and the messages that cross it, free of SDK objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A text message from a chat, already converted at the adapter's edge (SPEC S4)."""

    channel: str  # telegram | discord | console | web
    chat_id: str
    sender_id: str
    sender_name: str
    text: str
    is_direct: bool = True
    mentions_bot: bool = False
    thread_id: str | None = None
    chat_title: str = ""
    is_admin: bool = False  # decided by the adapter from its channel's `admins`
    trigger_source: str = "channel"  # web | channel | console | cron


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    channel: str
    chat_id: str
    text: str
    thread_id: str | None = None


@dataclass(frozen=True, slots=True)
class ChannelCapabilities:
    max_message_length: int
    rich_text: bool = False
    typing: bool = False


class Channel(Protocol):
    """What every adapter offers the daemon; it hands InboundMessages to the router."""

    name: str
    capabilities: ChannelCapabilities

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, message: OutboundMessage) -> None: ...

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None: ...


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


def chat_key(message: InboundMessage) -> str:
    """The chat itself, threads and topics included: what a `per-chat` agent is bound to."""
    prefixes = {"telegram": "tg", "discord": "dc"}
    return f"{prefixes.get(message.channel, message.channel)}:{message.chat_id}"
