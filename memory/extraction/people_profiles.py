"""Group members' profiles: one file per member in a group agent's workspace (people/<channel>-<id>.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.records import MessageRecord, WorkspaceFileRecord

PEOPLE_FOLDER = "people/"
# What a sender id may bring into a file name: the rest becomes "_" (a user name may hold
# anything; most channels' ids are digits).
_UNSAFE = re.compile(r"[^0-9A-Za-z_.@-]")


class ReadsFiles(Protocol):
    async def get(self, agent_id: int, filename: str) -> WorkspaceFileRecord | None: ...


def profile_filename(channel: str, sender_id: str) -> str:
    """`people/<channel>-<id>.md`: where a group's agent keeps what one member said about themselves."""
    safe = _UNSAFE.sub("_", sender_id).lstrip(".") or "_"
    return f"{PEOPLE_FOLDER}{_UNSAFE.sub('_', channel)}-{safe[:100]}.md"


def newest_first(current: tuple[str, str], earlier: Iterable[tuple[str, str]], limit: int) -> list[tuple[str, str]]:
    """The current sender, then the window's other senders from the newest, each once, at most `limit`."""
    chosen: list[tuple[str, str]] = []
    for account in (current, *earlier):
        if account not in chosen:
            chosen.append(account)
    return chosen[:limit]


async def profiles_block(files: ReadsFiles, agent_id: int, senders: Sequence[tuple[str, str]]) -> str:
    """The `--- people/<channel>-<id>.md ---` blocks of the senders that have a non-blank profile."""
    blocks: list[str] = []
    for channel, sender_id in senders:
        name = profile_filename(channel, sender_id)
        found = await files.get(agent_id, name)
        if found is not None and found.content.strip():
            blocks.append(f"--- {name} ---\n{found.content.rstrip()}")
    return "\n\n".join(blocks)


@dataclass(frozen=True, slots=True)
class Member:
    """One person of a group's transcript: their number, name and profile file."""
    ref: str  # P1, P2, ... in order of first appearance
    name: str
    sender_id: str
    filename: str  # people/<channel>-<sender id>.md


def members_of(messages: Sequence[MessageRecord], channel: str) -> tuple[Member, ...]:
    """The people who speak in `messages`, numbered P1, P2, ... in order of first appearance."""
    seen: dict[str, str] = {}
    for message in messages:
        if message.role == "user" and message.sender_id and message.sender_id not in seen:
            seen[message.sender_id] = " ".join((message.sender_name or message.sender_id).split())[:80]
    return tuple(Member(f"P{n}", name, sender, profile_filename(channel, sender))
                 for n, (sender, name) in enumerate(seen.items(), 1))
