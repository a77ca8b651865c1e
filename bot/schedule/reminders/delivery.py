"""ReminderDelivery: a due task as an agent turn in its chat, sent through the chat's channel, if its
maker still stands where the task was made."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol, runtime_checkable

from bot.conversation.access import AccessPolicies
from bot.core.prompts import PromptLibrary
from bot.storage import Repositories
from bot.storage.tasks import TaskRecord
from channels.base import CHANNEL_RETRYING, InboundMessage, OutboundMessage, RoutedReply, conversation_key, can_send

log = logging.getLogger(__name__)

READY_WAIT = 60.0  # how long a run waits for its channel to (re)connect, at start-up for one

# Why a task's maker no longer has what the task was made with (log text: no names, no ids).
LOST_ACCESS = "the person who made them may no longer talk to the bot in this chat"
LOST_SCHEDULING = "the person who made them may no longer schedule reminders in this chat"
LOST_ROUTE = "the person who made them now reaches another agent in this chat"

MaySchedule = Callable[[InboundMessage], bool]  # TaskService.may_schedule: the rules of today's config


class TaskTurns(Protocol):
    """The router's entry point as a task uses it (no stream, no confirmation)."""

    async def handle(self, message: InboundMessage, *, agent_id: int | None = None) -> RoutedReply | None: ...

    async def routed_agent(self, message: InboundMessage) -> int | None:
        """The agent today's routes and links send `message` to, if it exists yet; creates nothing."""
        ...


class Outlet(Protocol):
    """A channel adapter as a task's message leaves through it."""

    name: str

    @property
    def state(self) -> str: ...

    async def send(self, message: OutboundMessage) -> None: ...


@runtime_checkable
class PlaceFinder(Protocol):
    """A channel whose chat id does not tell its group or server (Discord)."""

    async def place_of(self, chat_id: str) -> str | None: ...


class ChannelOutbox:
    """The channels the daemon runs, by name; the console joins when it starts. Web chats have
    none: their history shows the message."""

    def __init__(self, *, ready_wait: float = READY_WAIT) -> None:
        self._channels: dict[str, Outlet] = {}
        self._ready_wait = ready_wait

    def add(self, channel: Outlet) -> None:
        self._channels[channel.name] = channel

    async def send(self, message: OutboundMessage, *, ready_wait: float | None = None) -> bool:
        """False when the message's channel is not running here, or has stopped, or is still
        (re)connecting after `ready_wait` seconds (default: the outbox's)."""
        channel = self._channels.get(message.channel)
        if channel is None:
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self._ready_wait if ready_wait is None else ready_wait)
        while channel.state == CHANNEL_RETRYING and loop.time() < deadline:  # connecting, or back soon
            await asyncio.sleep(0.2)
        if not can_send(channel.state) and channel.state != CHANNEL_RETRYING:
            log.warning("a message was not sent: the %s channel is %s", channel.name, channel.state,
                        extra={"channel": message.channel, "chat_id": message.chat_id})
            return False
        await channel.send(message)
        return True

    async def place_of(self, channel_name: str, chat_id: str) -> str | None:
        """The group or server a chat is in, asked of its channel (Discord: a channel's id does not
        tell its server); None when the channel does not run here or cannot tell."""
        channel = self._channels.get(channel_name)
        if not isinstance(channel, PlaceFinder) or not can_send(channel.state):
            return None
        return await channel.place_of(chat_id)


class ReminderDelivery:
    """Runs a task's turn in its chat's active conversation (trigger source `cron`, so memory
    extraction skips it), then sends the answer; when the model fails, the task's own message."""

    def __init__(
        self, turns: TaskTurns, outbox: ChannelOutbox, prompts: PromptLibrary, access: AccessPolicies,
        repos: Repositories,
    ) -> None:
        self._turns = turns
        self._outbox = outbox
        self._prompts = prompts
        self._access = access
        self._repos = repos

    async def lost_standing(self, task: TaskRecord, may_schedule: MaySchedule) -> str | None:
        """Why the task may not run as made (None: it may). The task runs on the agent it was made
        for and answers its maker's chat: when the operator took the account out of `admins`, of a
        `mate.people` link or of the allowlist, that agent's memory is no longer theirs to hear from."""
        message = await self._turn_of(task)
        policy = self._access.for_channel(message.channel)
        if policy.is_owners():  # console and web: the owner's, and the web page picks its agent
            return None
        if not self._still_allowed(message):
            return LOST_ACCESS
        # As the maker's own message: a scheduled turn itself may never schedule.
        if not may_schedule(replace(message, trigger_source="channel")):
            return LOST_SCHEDULING
        # Read only: a check that created the new route's agent (workspace, nightly job) for every
        # pending task's chat would do so just to say no. No agent there yet is another agent.
        if await self._turns.routed_agent(message) != task.agent_id:
            return LOST_ROUTE
        return None

    async def __call__(self, task: TaskRecord) -> bool:
        """Run the task's turn and send its answer (the timer checked `lost_standing` first)."""
        chat = task.chat
        where = {"channel": chat.channel, "chat_id": chat.chat_id}
        message = await self._turn_of(task)
        reply = await self._turns.handle(message, agent_id=task.agent_id)
        if reply is None:
            return False  # the router takes nothing more: the daemon is stopping
        text = reply.text
        if reply.failure:
            # A reminder is never lost to a model that is down: its own words go out instead,
            # and into the conversation, so start-up recovery does not answer it a second time.
            text = self._prompts.text("task_reminder_fallback", message=task.message)
            log.warning("task %s: the model failed (%s); sending its message as written", task.id, reply.failure,
                        extra=where)
            await self._store_fallback(reply.conversation_id, text)
        sent = await self._outbox.send(OutboundMessage(chat.channel, chat.chat_id, text, chat.thread_id))
        log.info("task %s delivered%s", task.id, "" if sent else " (kept in the conversation's history)",
                 extra=where)
        return True

    async def _turn_of(self, task: TaskRecord) -> InboundMessage:
        """The task's turn, as a message of its maker in its chat (and its group or server: access
        rules admit the place at every run, a Discord server too)."""
        chat = task.chat
        message = InboundMessage(
            channel=chat.channel, chat_id=chat.chat_id, thread_id=chat.thread_id, sender_id=task.created_by,
            sender_name=task.created_by_name or task.created_by, mentions_bot=True, trigger_source="cron",
            place_id=task.place_id,
            text=self._prompts.render("tasks/reminder-turn", message=task.message,
                                      created_by=task.created_by_name or task.created_by,
                                      repeating=bool(task.cron)),
        )
        if message.place_id is None:
            # A reminder made before places were kept: its server is asked once and kept, so the
            # server rules hold for it too (a channel that is not connected yet tells nothing).
            place = await self._outbox.place_of(chat.channel, chat.chat_id)
            if place is not None:
                await self._repos.tasks.set_place(task.id, place)
                message = replace(message, place_id=place)
        active = await self._repos.conversations.active_for_chat(conversation_key(message))
        is_direct = message.place_id is None and (active is None or not active.is_group)
        return replace(message, is_direct=is_direct)

    def _still_allowed(self, message: InboundMessage) -> bool:
        """The chat's access rules as a message of the task's maker would meet them now."""
        policy = self._access.for_channel(message.channel)
        return policy.decide(policy.access_of(message)).answers

    async def _store_fallback(self, conversation_id: str, text: str) -> None:
        try:
            await self._repos.messages.add_turn(conversation_id, [("assistant", text, max(1, len(text) // 4))])
        except Exception:  # the message still goes out
            log.exception("storing a reminder's fallback text failed", extra={"conversation_id": conversation_id})
