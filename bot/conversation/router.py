"""ChannelMessageRouter: inbound message -> agent -> reply, then the memory event (SPEC S4, S13)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

from bot.conversation.access import AccessPolicies, Decision, is_addressed
from bot.conversation.agent import Agent
from bot.conversation.agents import AgentDirectory
from bot.core.clock import Clock, iso, utc_now
from bot.conversation.commands.names import command_name
from bot.core.config import PERSON_CHANNELS, MateConfig
from bot.core.errors import StorageError
from bot.media.preparer import MediaPreparer, MediaRefused, PreparedMedia
from bot.conversation.people import Person, PersonDirectory
from bot.conversation.quiet_fold import QuietFolds
from bot.conversation.ports import CommandPort
from bot.core.prompts import PromptLibrary
from bot.storage.leases import Leases
from bot.storage import Repositories
from bot.core.records import ConversationRecord, MessageRecord
from bot.conversation.reminder_port import TurnTasks
from bot.core.text import clean_text, is_blank, led_by
from bot.core.tools import ToolSet
from bot.media.voice import is_audio
from channels.base import (
    InboundMessage,
    ReplyStream,
    RoutedReply,
    Stored,
    chat_key,
    conversation_key,
    parse_conversation_key,
)
from channels.formatting import REPLY_CUT_SEPARATOR, cut_reply
from channels.streaming import CappedStream
from memory.events import ConversationCompletedEvent, MemoryEventSink


log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 400_000


def clean_message(message: InboundMessage) -> InboundMessage:
    """clean_text on every text field: names and ids come from the network too."""
    text, chat_id = clean_text(message.text), clean_text(message.chat_id)
    sender_id, sender_name = clean_text(message.sender_id), clean_text(message.sender_name)
    chat_title = clean_text(message.chat_title)
    thread_id = None if message.thread_id is None else clean_text(message.thread_id)
    if (text, chat_id, sender_id, sender_name, chat_title, thread_id) == (
            message.text, message.chat_id, message.sender_id, message.sender_name, message.chat_title,
            message.thread_id):
        return message  # the usual case: nothing to clean, no copy
    return replace(message, text=text, chat_id=chat_id, sender_id=sender_id, sender_name=sender_name,
                   chat_title=chat_title, thread_id=thread_id)


class _Once:
    """Calls the adapter's `stored` callback at most once, whichever path gets there first."""

    def __init__(self, callback: Stored | None) -> None:
        self._callback = callback

    def cancel(self) -> None:
        self._callback = None

    def __call__(self) -> None:
        callback, self._callback = self._callback, None
        if callback is not None:
            try:
                callback()
            except Exception:  # the adapter's bookkeeping must not break the reply
                log.exception("the channel's stored callback failed")


class _KeyedLocks:
    """One FIFO lock per conversation key, dropped when nobody holds or waits for it; with
    `leases` (several daemons on one database) also held across daemons, as the lease "chat:<key>"."""

    def __init__(self, leases: Leases | None = None) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._leases = leases

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock, self._across_daemons(key):
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def _across_daemons(self, key: str) -> AbstractAsyncContextManager[None]:
        return self._leases.waited(f"chat:{key}") if self._leases else nullcontext()


@dataclass(frozen=True, slots=True)
class _Heard:
    """A voice note's message, its files read before it joined its chat's queue."""

    arrived: str  # when it came (bot.core.clock.iso): the time its user message is stored with
    read: PreparedMedia | MediaRefused  # the files, or the answer to give instead


class ChannelMessageRouter:
    """Routes chats to agents and conversations; strict order within one, concurrency across."""

    def __init__(
        self, config: MateConfig, repos: Repositories, agents: AgentDirectory, agent: Agent,
        memory: MemoryEventSink, prompts: PromptLibrary, *, commands: CommandPort, people: PersonDirectory,
        media: MediaPreparer | None = None, access: AccessPolicies | None = None, tasks: TurnTasks | None = None,
        clock: Clock = utc_now, leases: Leases | None = None, quiet: QuietFolds | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._tasks = tasks
        self._people = people
        self._access = access or AccessPolicies.from_config(config.channels)
        self._media = media
        self._repos = repos
        self._agents = agents
        self._agent = agent
        self._memory = memory
        self._prompts = prompts
        self._locks = _KeyedLocks(leases)  # one turn of a chat at a time, across daemons too
        self._quiet = quiet  # told of each answered turn: a chat quiet long enough is folded
        self._shared = leases is not None  # other daemons change conversations too: nothing cached
        self._voice_lanes = _KeyedLocks()  # a chat's voice notes, in the order they came
        self._active: dict[str, ConversationRecord] = {}
        self._in_flight = 0
        self._background: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._accepting = True
        self._commands = commands

    # -- routing ----------------------------------------------------------------------

    async def person_of(self, message: InboundMessage) -> Person:
        """Who sent `message`: the owner (person 1) or the person of that account."""
        owner = self._decide(message).is_admin
        return await self._people.resolve(message.channel, message.sender_id, message.sender_name, is_owner=owner)

    async def agent_for(self, message: InboundMessage, person: Person | None = None) -> int:
        """The agent of `message`, created where the route asks for one; `person`: the sender,
        when the caller has resolved them already."""
        found = await self.routed_agent(message, create=True, person=person)
        assert found is not None  # created where the route asks for one
        return found

    async def routed_agent(
        self, message: InboundMessage, *, create: bool = False, person: Person | None = None,
    ) -> int | None:
        """The agent today's routes send `message` to. Without `create` (a check, not a turn)
        nothing is made, no person, no agent: None when the chat's or person's own agent is not there yet."""
        for rule in self._config.routing:
            if rule.channel not in ("*", message.channel):
                continue
            chat = rule.chat
            if chat == "*" or (chat == "direct" and message.is_direct) or (
                chat == "group" and not message.is_direct) or chat == message.chat_id:
                if rule.agent == "per-chat":
                    # Bound to the chat, not the topic: a forum's topics share the group's agent.
                    key = chat_key(message)
                    if not create:
                        return await self._agents.existing_for_chat(key)
                    return await self._agents.for_chat(key, message.chat_title or key)
                if rule.agent == "per-person":
                    if not create:
                        return await self._agents.existing_for_account(
                            message.channel, message.sender_id, is_owner=self._decide(message).is_admin)
                    person = person or await self.person_of(message)
                    if person.is_owner:
                        return 1
                    return await self._agents.for_person(person.id)
                return rule.agent
        return self._config.agents[0].id

    async def conversation_for(
        self, message: InboundMessage, agent_id: int, key: str | None = None,
    ) -> ConversationRecord:
        """The chat's active conversation (`key`: its conversation key, when known). Only its identity
        is used from the record (id, agent, trigger source), which only this router changes, so it
        is cached; the window reads the summary fields itself. With several daemons on the
        database another one may start a new conversation (/new): then it is read every time."""
        key = key or conversation_key(message)
        found = self._active.get(key)
        if found is None:
            found = await self._repos.conversations.active_for_chat(key)
        if found is not None and found.agent_id == agent_id:
            self._cache_active(key, found)
            return found
        if found is not None:  # the routing changed: keep the old history, start afresh
            await self._repos.conversations.archive(found.id)
        created = await self._create_conversation(key, message, agent_id)
        self._cache_active(key, created)
        return created

    def _cache_active(self, key: str, conversation: ConversationRecord) -> None:
        if self._shared:
            return
        if len(self._active) >= 10_000 and key not in self._active:
            self._active.pop(next(iter(self._active)))  # oldest entry first (insertion order)
        self._active[key] = conversation

    async def _create_conversation(self, key: str, message: InboundMessage, agent_id: int) -> ConversationRecord:
        count = await self._repos.conversations.count_for_chat(key)
        conversation_id = key if count == 0 else f"{key}#{count + 1}"
        return await self._repos.conversations.create(
            conversation_id, agent_id=agent_id, channel=message.channel, chat_key=key,
            trigger_source=message.trigger_source, title=message.chat_title or None, is_group=not message.is_direct,
        )

    async def new_conversation(self, conversation: ConversationRecord, message: InboundMessage) -> ConversationRecord:
        """/new: archive the chat's conversation and open `<key>#<n>`."""
        await self._repos.conversations.archive(conversation.id)
        created = await self._create_conversation(conversation.chat_key, message, conversation.agent_id)
        self._cache_active(conversation.chat_key, created)
        return created

    # -- access -----------------------------------------------------------------------

    def is_admin(self, message: InboundMessage) -> bool:
        return self._decide(message).is_admin

    def _decide(self, message: InboundMessage) -> Decision:
        """Answer, refuse with an id line, or ignore: as the channel's access policy says."""
        policy = self._access.for_channel(message.channel)
        return policy.decide(policy.access_of(message))

    # -- handling ---------------------------------------------------------------------

    def stop_intake(self) -> None:
        self._accepting = False

    async def drain(self, timeout: float) -> bool:
        """Wait for in-flight replies and the quiet folds that are due; False when the timeout passed first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return self._quiet is None or await self._quiet.drain(max(0.0, deadline - loop.time()))

    async def handle(
        self, message: InboundMessage, *, agent_id: int | None = None, stored: Stored | None = None,
        stream: ReplyStream | None = None,
    ) -> RoutedReply | None:
        """The reply to send back, or None when the message is ignored.

        `stream` is shown the model's answer as it is written; the reply is complete anyway.

        `stored` is called exactly once: when the user message is committed, or as soon as
        it is clear that nothing will be stored (ignored, refused, a command, an error).

        Every reply to a chat passes here (the adapters', the console's, the web page's and the
        API's, reminders' and cron turns'), so here it is bounded: at most
        `mate.channels.max-reply-chars` of it, shown or streamed, whatever the model wrote.
        """
        limit, marker = self._config.channels.max_reply_chars, self._prompts.text("reply_cut")
        capped = CappedStream(stream, limit, marker) if stream is not None else None
        return self._bounded(await self._handle_message(message, agent_id, stored, capped))

    def _bounded(self, reply: RoutedReply | None) -> RoutedReply | None:
        """A backstop: the agent cuts (and keeps) its own replies; this cuts the others (a command's)."""
        limit, marker = self._config.channels.max_reply_chars, self._prompts.text("reply_cut")
        if reply is None or len(reply.text) <= limit:
            return reply
        if len(reply.text) <= limit + len(marker) and REPLY_CUT_SEPARATOR + marker in reply.text:
            return reply  # cut already, maybe with an apology after the marker
        log.warning("a reply of %d characters was cut to mate.channels.max-reply-chars (%d)", len(reply.text),
                    limit, extra={"conversation_id": reply.conversation_id})
        return replace(reply, text=cut_reply(reply.text, limit, marker))

    async def _handle_message(
        self, message: InboundMessage, agent_id: int | None, stored: Stored | None, stream: ReplyStream | None,
    ) -> RoutedReply | None:
        once = _Once(stored)
        try:
            message = clean_message(message)
            if not self._accepting:
                once.cancel()  # not stored and not to be confirmed: the platform delivers it again
                return None
            if is_blank(message.text) and not message.files:
                return None
            decision = self._decide(message)
            if decision.refuses:
                log.info("refused a message from a user not on the allowlist",
                         extra={"channel": message.channel, "chat_id": message.chat_id})
                return RoutedReply(decision.refusal_line(self._prompts), conversation_key(message), 0)
            if not decision.answers:
                return None
            self._in_flight += 1
            self._idle.clear()
            try:
                return await self._handle(message, decision, agent_id, once, stream)
            except (sqlite3.Error, StorageError) as exc:  # a read-only file, a full disk
                log.error("storing the conversation failed: %s", exc,
                          extra={"channel": message.channel, "chat_id": message.chat_id})
                return RoutedReply(self._prompts.text("storage_error"), conversation_key(message), 0, "storage")
            finally:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._idle.set()
        finally:
            once()

    async def _handle(
        self, message: InboundMessage, decision: Decision, forced_agent: int | None, once: _Once,
        stream: ReplyStream | None,
    ) -> RoutedReply | None:
        key = conversation_key(message)
        voice = self._media is not None and any(is_audio(file) for file in message.files)
        if not voice:
            return await self._in_turn(message, key, decision, forced_agent, once, stream, None)
        # A voice note is transcribed before it joins its chat's queue, so the chat's typed
        # messages are answered meanwhile; it keeps its place among the chat's voice notes, and
        # its user message is stored with the time it came, not the time its lane came free.
        arrived = iso(self._clock())
        if await self._answered_already(key, message):
            return None
        async with self._voice_lanes.hold(key):
            heard = await self._hear(message, arrived)
            return await self._in_turn(message, key, decision, forced_agent, once, stream, heard)

    async def _answered_already(self, key: str, message: InboundMessage) -> bool:
        """Whether the chat's conversation holds `message` answered (a platform's redelivery): a
        read outside the chat's turn, so a voice note delivered again is not transcribed again
        (the turn checks again in any case)."""
        if message.external_id is None:
            return False
        conversation = self._active.get(key) or await self._repos.conversations.active_for_chat(key)
        if conversation is None:
            return False
        found = await self._repos.messages.find_external(conversation.id, message.external_id)
        if found is None or not found[2]:
            return False
        log.info("message delivered twice; already answered", extra={"conversation_id": key})
        return True

    async def _hear(self, message: InboundMessage, arrived: str | None = None) -> _Heard:
        arrived = arrived or iso(self._clock())
        try:
            return _Heard(arrived, await self._prepared(message))
        except MediaRefused as refused:
            return _Heard(arrived, refused)

    async def _in_turn(
        self, message: InboundMessage, key: str, decision: Decision, forced_agent: int | None, once: _Once,
        stream: ReplyStream | None, heard: _Heard | None,
    ) -> RoutedReply | None:
        """The reply to `message` (its chat's conversation key `key`), made in its turn: one message
        of a chat at a time."""
        async with self._locks.hold(key):
            # A run missed while the daemon was down is mentioned once, in a reply to the person:
            # forgotten only when a reply carries it (a reminder's own turn never takes it).
            notice = await self._tasks.take_notice(message) if self._tasks is not None else None
            reply: RoutedReply | None = None
            try:
                reply = await self._reply(message, key, decision, forced_agent, once, stream,
                                          notice.text if notice else "", heard)
                return reply
            finally:
                if notice is not None and self._tasks is not None:
                    try:
                        await self._tasks.settle_notice(notice, shown=reply is not None)
                    except Exception:  # the reply exists already; at worst the notice comes again
                        log.warning("recording that a missed reminder was mentioned failed", exc_info=True)

    async def _reply(
        self, message: InboundMessage, key: str, decision: Decision, forced_agent: int | None, once: _Once,
        stream: ReplyStream | None, lead: str, heard: _Heard | None = None,
    ) -> RoutedReply | None:
        """The reply to `message`, opened by `lead` (stored with the model's answer, when there is one)."""
        person = None
        if message.channel in PERSON_CHANNELS:  # a person on first contact, in a group too
            person = await self._people.resolve(message.channel, message.sender_id, message.sender_name,
                                                is_owner=decision.is_admin)
        agent_id = forced_agent if forced_agent is not None else await self.agent_for(message, person)
        conversation = await self.conversation_for(message, agent_id, key)
        text = message.text
        if not message.files and command_name(text) is not None:
            answer = await self._commands.handle(self, message, conversation, text.strip())
            if answer is not None:
                return RoutedReply(led_by(lead, answer), conversation.id, agent_id)
        if len(text) > MAX_MESSAGE_CHARS:
            too_large = self._prompts.text("message_too_large", size=len(text.encode("utf-8")),
                                           limit=MAX_MESSAGE_CHARS)
            return RoutedReply(led_by(lead, too_large), conversation.id, agent_id)
        existing: tuple[int, int] | None = None
        sent_at: str | None = None
        if message.external_id is not None:
            found = await self._repos.messages.find_external(conversation.id, message.external_id)
            if found is not None:
                record, previous_id, answered = found
                if answered:  # delivered again after a crash, and already answered
                    log.info("message delivered twice; already answered", extra={"conversation_id": key})
                    return None
                existing, sent_at = (record.id, previous_id), record.create_time
        media = None
        if message.files:
            read = (heard if heard is not None else await self._hear(message)).read
            if isinstance(read, MediaRefused):
                refused = read
                if refused.key == "voice_off" and not message.is_direct and not is_addressed(message):
                    return None  # a group that is answered without a mention: chatter, not a request
                refusal = self._prompts.text(refused.key, **refused.params)
                return RoutedReply(led_by(lead, refusal), conversation.id, agent_id)
            media = read
            if heard is not None:
                sent_at = sent_at or heard.arrived
            text = media.history_text(text)
        stored = text if message.is_direct else f"[{message.sender_name or message.sender_id}] {text}"
        tools = self._tasks.tools_for(message) if self._tasks is not None else ()
        return await self._answer(conversation, stored, text, message.sender_id, message.sender_name,
                                  message.external_id, existing, once, stream, sent_at, media, tools,
                                  message.trigger_source == "cron", lead)

    async def _prepared(self, message: InboundMessage) -> PreparedMedia:
        if self._media is None:
            raise MediaRefused("text_only")
        try:
            return await self._media.prepare(message.files)
        except MediaRefused:
            raise
        except Exception:  # a file we could not take apart still gets an answer
            log.exception("preparing a message's files failed", extra={"channel": message.channel})
            raise MediaRefused("media_unsupported", name=message.files[0].filename or "file") from None

    async def _answer(
        self, conversation: ConversationRecord, stored: str, user_text: str, sender_id: str | None,
        sender_name: str | None, external_id: str | None, existing: tuple[int, int] | None,
        on_stored: Stored | None, stream: ReplyStream | None = None, sent_at: str | None = None,
        media: PreparedMedia | None = None, tools: tuple[ToolSet, ...] = (), scheduled: bool = False,
        lead: str = "",
    ) -> RoutedReply:
        agent = await self._agents.get(conversation.agent_id)
        reply = await self._agent.respond(conversation, stored, agent_name=agent.name, sender_id=sender_id,
                                          sender_name=sender_name, external_id=external_id, existing=existing,
                                          on_stored=on_stored, stream=stream, sent_at=sent_at, media=media,
                                          turn_tools=tools, lead=lead)
        if reply.ok and reply.last_message_id is not None:
            # Off the reply path: the turn is stored, so the reply can go now; drain()
            # waits for this too, and the upsert keeps the furthest upto whatever the order.
            # The event carries what the user wrote: a group's "[Name] " prefix must not
            # count toward the length pre-check.
            # A scheduled task's turn is a `cron` turn wherever it runs: extraction skips it.
            self._track(self._publish(conversation, user_text, reply.text, reply.last_message_id,
                                      reply.message_count, "cron" if scheduled else conversation.trigger_source))
            if self._quiet is not None:
                self._quiet.heard(conversation, self._locks.hold)
        return RoutedReply(reply.text, conversation.id, conversation.agent_id, reply.failure, answered=reply.ok)

    async def recover_unanswered(self, since: str) -> list[RoutedReply]:
        """Answer, once, every user message stored since `since` that has no reply yet (the
        process stopped mid-reply): the replies to send, in the order the messages came."""
        answered: list[RoutedReply | None] = []
        for conversation_id, record, previous_id in await self._repos.messages.unanswered_since(since):
            conversation = await self._repos.conversations.get(conversation_id)
            if conversation is None:
                continue
            speaker = record.sender_name or record.sender_id or ""
            prefix = f"[{speaker}] "
            user_text = record.content[len(prefix):] if speaker and record.content.startswith(prefix) else record.content
            self._in_flight += 1
            self._idle.clear()
            try:
                async with self._locks.hold(conversation.chat_key):
                    if await self._repos.messages.last_id(conversation_id) != record.id:
                        continue  # answered meanwhile (the platform delivered it again)
                    if not await self._still_routed_here(conversation, record):
                        log.info("a message left unanswered is not answered: the rules now send it elsewhere",
                                 extra={"conversation_id": conversation_id})
                        continue
                    scheduled = self._tasks is not None and self._tasks.is_reminder_turn(user_text)
                    reply = await self._answer(conversation, record.content, user_text, record.sender_id,
                                               record.sender_name, None, (record.id, previous_id), None,
                                               sent_at=record.create_time, scheduled=scheduled)
            except Exception:  # boundary: one conversation's failure must not stop the others
                log.exception("could not answer a message left unanswered", extra={"conversation_id": conversation_id})
                continue
            finally:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._idle.set()
            log.info("answered a message left unanswered by the previous run",
                     extra={"conversation_id": conversation_id})
            answered.append(self._bounded(reply))
        return [reply for reply in answered if reply is not None]

    async def _still_routed_here(self, conversation: ConversationRecord, record: MessageRecord) -> bool:
        """Whether today's access rules and routes still send a stored message to the agent its
        conversation has: after an upgrade, or a link, an admin or an allowed group removed, an
        agent must not answer a chat or a person it no longer belongs to. Nothing is created to
        find out: a route to an agent not made yet is not this conversation's."""
        place = parse_conversation_key(conversation.id)
        if place is None:  # the console / web: the owner's
            return True
        channel, chat_id, thread_id = place
        group = conversation.is_group
        # A group's stored message was one the bot answers (addressed to it), or it would not be there.
        message = InboundMessage(channel=channel, chat_id=chat_id, thread_id=thread_id,
                                 sender_id=record.sender_id or "", sender_name=record.sender_name or "",
                                 text=record.content, is_direct=not group, mentions_bot=group)
        if not self._decide(message).answers:
            return False
        return await self.routed_agent(message) == conversation.agent_id

    def _track(self, work: Coroutine[Any, Any, None]) -> None:
        self._in_flight += 1
        self._idle.clear()
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    async def _publish(self, conversation: ConversationRecord, user_text: str, reply: str, upto: int,
                       count: int, trigger_source: str) -> None:
        try:
            event = ConversationCompletedEvent(
                agent_id=conversation.agent_id, conversation_id=conversation.id, user_message=user_text,
                assistant_reply=reply, message_count=count, trigger_source=trigger_source,
            )
            await self._memory.publish(event, upto)
        except Exception:  # the reply is already made; memory has its own durable retry
            log.exception("could not publish the memory event", extra={"conversation_id": conversation.id})
