"""A group chat as the router stores one, for the extraction tests: two members, each line answered."""

from __future__ import annotations

from bot.app.core import Core

GROUP = "tg:-1001"
SPEAKERS = (("111", "Alice"), ("222", "Bob"))


async def group_chat(core: Core, agent_id: int, lines: list[tuple[str, str, str]]) -> None:
    """(sender id, name, text) user lines, each answered; stored as the router stores a group's."""
    await core.repos.conversations.create(GROUP, agent_id=agent_id, channel="telegram", chat_key=GROUP,
                                          trigger_source="channel", is_group=True)
    for sender, name, text in lines:
        await core.repos.messages.add_user(GROUP, f"[{name}] {text}", 1, sender, name, None)
        await core.repos.messages.add_turn(GROUP, [("assistant", "noted", 1, "text")])


LINES = [("111", "Alice", "I work as a nurse"), ("222", "Bob", "I live in Porto and Alice plays chess"),
         ("111", "Alice", "my cat is called Miso")]
