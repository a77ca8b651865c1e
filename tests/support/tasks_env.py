"""Reminders end to end in one process: the real runtime, Telegram (and Discord) adapters on their
fakes, the fake Messages API, and the real TaskTimer on a clock the test may move."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bot.app.runtime import Runtime
from bot.schedule.reminders.delivery import ChannelOutbox, ReminderDelivery
from bot.schedule.timer import TaskTimer
from tests.support.config import pinned_clock
from tests.support.eventually import eventually
from tests.support.runtime import discord_channel, running, telegram_channel
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, is_memory_extraction
from tests.support.fakes.discord import FakeDiscord
from tests.support.fakes.telegram import FakeTelegram

OWNER = 42  # a Telegram admin
FRIEND = 7  # on the Telegram allowlist
MEMBER = 9  # in the group only
GROUP = -1001
OWNER_DC, FRIEND_DC = "70", "80"
SCHEDULED_MARK = "[Scheduled"  # how the reminder turn's instruction starts (prompts/en/tasks)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)  # type: ignore[misc]


def last_text(recorded: RecordedRequest) -> str:
    content = recorded.body["messages"][-1]["content"]
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def tool_names(recorded: RecordedRequest) -> list[str]:
    return [tool["name"] for tool in recorded.body.get("tools", [])]


def tool_results(recorded: RecordedRequest) -> list[dict[str, Any]]:
    content = recorded.body["messages"][-1]["content"]
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] \
        if isinstance(content, list) else []


@dataclass
class World:
    rt: Runtime
    llm: FakeAnthropic
    tg: FakeTelegram
    dc: FakeDiscord | None
    timer: TaskTimer
    clock: Callable[[], datetime]
    # What the model answers to a reminder's turn (after `hold`, when set).
    reminder_reply: Callable[[str], Script] = field(default=lambda instruction: TextReply("It is time!"))

    def chats(self) -> list[RecordedRequest]:
        return [r for r in self.llm.requests if r.path == "/v1/messages"
                and not is_memory_extraction(r.body)]

    def reminder_turns(self) -> list[RecordedRequest]:
        return [r for r in self.chats() if SCHEDULED_MARK in last_text(r)]

    def sent_to(self, chat_id: int) -> list[str]:
        return [str(s["text"]) for s in self.tg.sent if str(s["chat_id"]) == str(chat_id)]

    async def until(self, done: Callable[[], bool], what: str, timeout: float = 15) -> None:
        await eventually(done, what, timeout, poll=0.02)

    async def tell(self, chat_id: int, text: str, *, user_id: int | None = None, group: bool = False,
                   name: str = "Alice") -> str:
        """A Telegram message from `user_id` (default: the chat) and the bot's answer to it."""
        before = len(self.sent_to(chat_id))
        self.tg.push_text(text, chat_id=chat_id, user_id=user_id or chat_id, first_name=name,
                          chat_type="group" if group else "private")
        await self.until(lambda: len(self.sent_to(chat_id)) > before, f"the answer to {text!r}")
        return self.sent_to(chat_id)[before]


def _reminders_first(world: list[World]) -> Callable[[RecordedRequest], Script | None]:
    def respond(recorded: RecordedRequest) -> Script | None:
        if world and recorded.path == "/v1/messages" and SCHEDULED_MARK in last_text(recorded):
            return world[0].reminder_reply(last_text(recorded))
        return None  # the test's queue, then the default text

    return respond


@asynccontextmanager
async def world(
    tmp_path: Path, *, clock: Callable[[], datetime] | None = None, discord_too: bool = False,
    max_sleep: float = 0.05, llm: FakeAnthropic | None = None, tg: FakeTelegram | None = None,
    discord_guilds: tuple[str, ...] = ("100",), **mate: Any,
) -> AsyncIterator[World]:
    """Everything a reminder goes through, on fakes; `mate` overrides configuration keys;
    `discord_guilds`: the servers a Discord world allows (the fake's own is "100")."""
    async with AsyncExitStack() as stack:
        fake_llm = llm or await stack.enter_async_context(FakeAnthropic(default_text="ok"))
        fake_tg = tg or await stack.enter_async_context(FakeTelegram())
        fake_dc = await stack.enter_async_context(FakeDiscord()) if discord_too else None
        channels: dict[str, Any] = {
            "telegram": {"enabled": True, "token": fake_tg.token, "base-url": fake_tg.base_url,
                         "admins": [str(OWNER)], "allowed-users": [str(FRIEND)], "group-policy": "open",
                         "require-mention": False}}
        if fake_dc is not None:
            channels["discord"] = {"enabled": True, "token": "TOKEN", "admins": [OWNER_DC],
                                   "allowed-users": [FRIEND_DC], "allowed-guilds": list(discord_guilds),
                                   "api-base-url": fake_dc.api_base, "gateway-url": fake_dc.gateway_url}
        chosen = clock or pinned_clock()  # a fixed day (a Wednesday), running at the machine's pace
        # The tools, storage and the timer keep one time: a test's stepped clock, or this moment's.
        rt = await stack.enter_async_context(running(
            tmp_path, fake_llm, memory_worker=True, clock=chosen,
            llm={"api-key": "k", "base-url": fake_llm.url, "max-retries": 0, "stream": False},
            **{"channels": channels, **mate}))
        config = rt.core.config
        holder: list[World] = []
        fake_llm.responder = _reminders_first(holder)
        outbox = ChannelOutbox(ready_wait=10)
        telegram, _ = await stack.enter_async_context(telegram_channel(rt, access=rt.access.telegram))
        outbox.add(telegram)
        if fake_dc is not None:
            outbox.add(await stack.enter_async_context(discord_channel(rt, fake_dc, access=rt.access.discord)))
        delivery = ReminderDelivery(rt.router, outbox, rt.core.prompts, rt.access, rt.core.repos)
        timer = await stack.enter_async_context(TaskTimer(
            rt.core.repos.tasks, rt.tasks, delivery, catch_up_minutes=config.mate.tasks.catch_up_minutes,
            clock=chosen, max_sleep=max_sleep))
        opened = World(rt, fake_llm, fake_tg, fake_dc, timer, chosen)
        holder.append(opened)
        yield opened
