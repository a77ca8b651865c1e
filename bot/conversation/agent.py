"""Agent: one turn of a conversation — window, LLM, tool loop, stored reply (SPEC S4, S5, S9)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from bot.core.config import MateConfig
from bot.llm.cache_lifetime import cache_lifetime
from bot.llm.chat_prefix import ChatPrefix, ChatPrefixes
from bot.llm.memory_snapshot import FileChange, MemorySnapshots
from bot.llm.text_tool_calls import Labels, ReadReply, VisiblePreview, read_reply
from bot.core.content.messages import Content, HistoryItem, encode_content, plain_text
from bot.llm.tokens import PER_MESSAGE_OVERHEAD, TokenEstimator
from bot.conversation.claims import SCHEDULE_TOOL, HonestReplies, ToolOutcome
from bot.conversation.window import ConversationWindowManager, MessageTooLong, Window
from bot.core.clock import Clock, iso, parse_iso, utc_now
from bot.core.errors import LLMBusy, LLMError, PromptTooLong, StreamBroken
from bot.llm import LLMClient, LLMRequest, LLMResponse, ToolCall
from bot.media.preparer import PreparedMedia
from bot.core.content.remember import scheduled_turn_heads
from bot.core.prompts import PromptLibrary
from bot.storage import Repositories
from bot.core.records import ConversationRecord
from bot.core.text import led_by
from bot.core.tools import ToolResult, ToolSet
from channels.base import ReplyStream
from channels.formatting import REPLY_CUT_SEPARATOR, cut_reply
from memory.extraction.people_profiles import newest_first, profiles_block
from memory.workspace.service import WorkspaceFileService

log = logging.getLogger(__name__)

# The turn's entries the model is shown but the history does not keep: a reply that imitated
# a tool result, and the correction that asked for another (SPEC S34).
_UNKEPT = ("imitation", "correction")


@dataclass(frozen=True, slots=True)
class AgentReply:
    text: str
    ok: bool  # False: a refusal or apology; nothing from the model was stored
    user_message_id: int | None = None
    last_message_id: int | None = None
    message_count: int = 0  # user and assistant messages stored in the conversation
    # "llm" (the model could not answer) | "busy" (no model call could start in time)
    # | "storage" (the turn could not be stored)
    failure: str = ""


def _as_sent(item: HistoryItem, media: PreparedMedia | None) -> HistoryItem:
    """The user message as this turn's request carries it, images included (the stored and
    cached one has "[image]" markers)."""
    if media is None or not media.blocks:
        return item
    content: Content = [*media.blocks, {"type": "text", "text": plain_text(item.content)}]
    return replace(item, content=content, tokens=item.tokens + media.tokens)


def local_today_text(timezone_name: str, now: datetime | None = None) -> str:
    """"2026-12-03, Thursday (Europe/Berlin)" for `now` (default: this moment): the system
    prompt changes once a day, not once a minute, so the provider's prompt cache can hold it
    (the time goes with each user message instead)."""
    from bot.core.clock import zone

    moment = (now or utc_now()).astimezone(zone(timezone_name))
    return f"{moment.strftime('%Y-%m-%d, %A')} ({timezone_name})"


def our_labels(prompts: PromptLibrary) -> Labels:
    """The labels our prompts put around what the model reads, as an echo of them is found in
    a reply: the "memory updated" note (its first line, then its change lines) and the summary's
    prefix. The time label is known to read_reply itself."""
    header = prompts.render("agent/memory-updated", changes=[])
    sample = prompts.render("agent/memory-updated", changes=[FileChange("\x01", ("\x02",), ("\x03",))])
    follow = tuple(
        re.compile(re.escape(line).replace("\x01", r"\S+\.md").replace("\x02", ".*").replace("\x03", ".*"))
        for line in sample.split("\n") if line.strip() and line.strip() != header.strip())
    return Labels(headers=(header.strip(), prompts.text("summary_prefix").strip()), follow=follow)


def _last_turn_at(window: Window) -> datetime | None:
    """When the conversation's previous turn was sent: the newest stored time before this turn."""
    for item in reversed(window.history):
        if item.time:
            try:
                return parse_iso(item.time)
            except ValueError:
                return None
    return None


class _DayText:
    """local_today_text, computed once a minute of `clock` at most: every request shows it."""

    def __init__(self, timezone_name: str, clock: Clock = utc_now) -> None:
        self._timezone = timezone_name
        self._clock = clock
        self._minute = -1
        self._text = ""

    def __call__(self) -> str:
        now = self._clock()
        minute = int(now.timestamp() // 60)  # zone offsets are whole minutes: local days turn with UTC minutes
        if minute != self._minute:
            self._text = local_today_text(self._timezone, now)
            self._minute = minute
        return self._text


class Agent:
    """Answers one user message of a conversation and stores the whole turn at once."""

    def __init__(
        self, config: MateConfig, repos: Repositories, workspace: WorkspaceFileService,
        window: ConversationWindowManager, llm: LLMClient, tokens: TokenEstimator,
        prompts: PromptLibrary, tools: Sequence[ToolSet] = (),
        today_text: Callable[[], str] | None = None, clock: Clock = utc_now,
        prefixes: ChatPrefixes | None = None, reply_limit: int | None = None, cut_marker: str | None = None,
    ) -> None:
        self._config = config
        # What the person gets is what is kept (history, the next window, memory): a reply cut at
        # mate.channels.max-reply-chars, with the marker the chat shows.
        self._reply_limit = config.channels.max_reply_chars if reply_limit is None else reply_limit
        self._cut_marker = prompts.text("reply_cut") if cut_marker is None else cut_marker
        self._repos = repos
        self._workspace = workspace
        self._window = window
        self._llm = llm
        self._tokens = tokens
        self._prompts = prompts
        self._tools = list(tools)
        self._definitions = [d for t in self._tools for d in t.definitions()]
        self._with_turn_tools: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        self._base_prompts: dict[tuple[str, str], str] = {}
        self._today_text = today_text or _DayText(config.timezone, clock)
        self._clock = clock
        self._snapshots = MemorySnapshots(lambda changes: prompts.render("agent/memory-updated", changes=changes))
        self._prefixes = prefixes  # told each direct conversation's cached prefix, for its memory extraction
        self._labels = our_labels(prompts)
        # Tool markup is looked for where written tool calls are parsed (mate.llm.text-tool-calls):
        # there the model writes it; elsewhere a reply with JSON in it is an answer.
        self._markup = config.llm.parses_text_tool_calls
        self._honest = HonestReplies(prompts, config.memory.remember_keywords)
        self._scheduled_heads = scheduled_turn_heads()  # a scheduled run's own turn asks for nothing

    @property
    def model(self) -> str:
        return self._config.llm.model

    def tool_definitions(self, turn_tools: Sequence[ToolSet] = ()) -> list[dict[str, Any]]:
        """The tools of every turn, then those offered to this turn's sender (the same list
        object each time for the same names: the token count is cached by identity)."""
        added = [d for t in turn_tools for d in t.definitions()]
        if not added:
            return self._definitions
        key = tuple(d["name"] for d in added)
        found = self._with_turn_tools.get(key)
        if found is None:
            found = self._with_turn_tools[key] = self._definitions + added
        return found

    async def system_prompt(self, agent_id: int, agent_name: str) -> str:
        return (await self._system(agent_id, agent_name))[0]

    async def _system(
        self, agent_id: int, agent_name: str, group: ConversationRecord | None = None, sender_id: str | None = None,
    ) -> tuple[str, int]:
        """The system prompt and where its base part ends (a cache breakpoint goes there).

        In a group (`group`) the profiles of the sender and of the other recent speakers follow
        the workspace files, so the model knows who is who without mixing them up.
        """
        today = self._today_text()
        key = (agent_name, today)
        base = self._base_prompts.get(key)
        if base is None:  # the text changes once a day (it shows the date)
            if len(self._base_prompts) > 256:
                self._base_prompts.clear()
            base = self._base_prompts[key] = self._prompts.render(
                "agent/system", agent_name=agent_name, today=today, channel_hint="")
        system = await self._workspace.build_system_prompt(agent_id, base)
        if group is not None and sender_id:
            people = await self._member_profiles(group, sender_id)
            system = f"{system}\n\n{people}" if people else system
        split = len(base.rstrip())
        return system, split if system.startswith(base.rstrip()) else 0

    async def _member_profiles(self, group: ConversationRecord, sender_id: str) -> str:
        limit = self._config.memory.group_profiles_max
        if limit <= 0:
            return ""
        recent = await self._repos.messages.recent_senders(group.id, limit, after_id=group.summary_upto_message_id)
        senders = newest_first((group.channel, sender_id), [(group.channel, s) for s in recent], limit)
        return await profiles_block(self._workspace, group.agent_id, senders)

    async def respond(
        self, conversation: ConversationRecord, text: str, *, agent_name: str = "Mate",
        sender_id: str | None = None, sender_name: str | None = None, external_id: str | None = None,
        existing: tuple[int, int] | None = None, on_stored: Callable[[], None] | None = None,
        stream: ReplyStream | None = None, sent_at: str | None = None, media: PreparedMedia | None = None,
        turn_tools: Sequence[ToolSet] = (), lead: str = "",
    ) -> AgentReply:
        """Answer `text`; `existing` = (id, previous id) when it is already stored (recovery),
        `sent_at` its stored time.

        `on_stored` is called once the user message is committed, before the model answers;
        `stream` is shown the answer as it is written (when `mate.llm.stream` is on).
        `media`: the message's images and documents, sent with this turn only; `text` is
        the message as the history keeps it (with "[image]" markers).
        `turn_tools`: tool sets for this turn only, beside the agent's own (a sender's task tools).
        `lead`: lines the reply opens with (a missed reminder's notice), kept with the stored answer.
        """
        tools = self.tool_definitions(turn_tools)
        group = conversation if conversation.is_group else None
        system, split = await self._system(conversation.agent_id, agent_name, group, sender_id)
        user_tokens = self._tokens.count_text(text)
        media_tokens = media.tokens if media is not None and media.blocks else 0
        too_long = self._window.check_fits(system, tools, user_tokens + media_tokens, self.model)
        if too_long is not None:  # answered without storing it or calling the LLM
            log.info("message too long for the window: %d > %d tokens", too_long.tokens, too_long.budget)
            return _led(self._too_long(too_long, None), lead)
        now = sent_at or iso(self._clock())
        if existing is not None:
            user_id, previous_id = existing
        else:
            user_id, previous_id = await self._repos.messages.add_user(
                conversation.id, text, user_tokens, sender_id, sender_name, external_id, create_time=now)
        if on_stored is not None:
            on_stored()
        user = HistoryItem(user_id, "user", text, user_tokens, now)
        # The stored ids bound the history read: the cached window serves only when it ends
        # right before this message, so one that someone else wrote meanwhile is read back.
        window = await self._window.build(conversation, system, [_as_sent(user, media)], tools, self.model,
                                          previous_id=previous_id)
        self._window.record(conversation.id, previous_id, [user])
        if isinstance(window, MessageTooLong):  # check_fits said it fits; only calibration can move
            return _led(self._too_long(window, user_id), lead)
        if group is None:  # a group's prompt changes with who speaks: it is rebuilt each turn
            kept = self._snapshots.choose(conversation.id, system, split, window.summary,
                                          compacted=window.compacted, now=self._clock())
            window.system, split = kept.system, kept.split
            window.memory_note = kept.note
            window.raw_tokens += self._tokens.count_text(window.memory_note) if window.memory_note else 0
        live = stream if stream is not None and self._config.llm.stream else None
        reply = await self._run_turn(conversation, window, user_id, split, live, turn_tools, lead, text)
        # A stored answer holds the lead already; an apology (nothing stored) gets it here.
        return reply if reply.last_message_id is not None else _led(reply, lead)

    def _too_long(self, result: MessageTooLong, user_message_id: int | None) -> AgentReply:
        return AgentReply(self._prompts.text("too_long", tokens=result.tokens, budget=result.budget),
                          ok=False, user_message_id=user_message_id)

    async def _run_turn(
        self, conversation: ConversationRecord, window: Window, user_id: int, split: int,
        stream: ReplyStream | None, turn_tools: Sequence[ToolSet] = (), lead: str = "", asked: str = "",
    ) -> AgentReply:
        turn: list[tuple[str, Content]] = []
        outcomes: list[ToolOutcome] = []  # every tool call of the turn, in order
        rounds = 0
        retried = corrected = False
        said: list[str] = []  # what the model wrote beside its tool calls, as a person may see it
        offered = frozenset(str(d.get("name")) for d in window.tools)
        preview: VisiblePreview | None = None
        # Decided once a turn: its tool rounds read the prefix the first request wrote. A prefix
        # that changed (a new day, a compaction) gets the same lifetime as any other: written for 5
        # minutes first, it cost the day bench two writes of the conversation in one session.
        lifetime = cache_lifetime(self._config.llm.cache, _last_turn_at(window), self._clock())
        self._snapshots.sent(conversation.id, lifetime, self._clock())
        # What memory extraction may reuse, once the provider says it cached it (a group's prompt
        # changes with who speaks: never).
        prefix = None if lifetime is None or conversation.is_group else ChatPrefix(
            self.model, window.system, split, window.tools, lifetime, self._clock(), summary=window.summary,
            message_ids=tuple(i.id for i in (*window.history, *window.current)))
        while True:
            extra = [("assistant" if role in ("assistant", "imitation") else "user", content) for role, content in turn]
            messages = self._window.assemble(window, extra)
            request = LLMRequest(
                model=self.model, system=window.system, messages=messages,
                max_tokens=self._config.llm.max_output_tokens, tools=window.tools,
                agent_id=conversation.agent_id, conversation_id=conversation.id,
                system_split=split, cache_messages=self._breakpoints(messages, len(extra)),
                cache=lifetime is not None, cache_ttl=lifetime or "5m",
            )
            if stream is not None:  # each answer is shown as a person may see it: no markup, no labels
                preview = VisiblePreview(stream.text, offered, self._labels, markup=self._markup)
            try:
                response = await self._llm.complete(request, preview.text if preview is not None else None)
            except StreamBroken as exc:
                log.warning("the model's answer broke off: %s", exc, extra={"conversation_id": conversation.id})
                shown = preview.shown if preview is not None else self._read(exc.partial, offered).text
                return await self._broken(conversation, user_id, turn, shown, lead)
            except PromptTooLong:
                if retried:
                    log.warning("prompt too long even after the emergency compaction",
                                extra={"conversation_id": conversation.id})
                    return AgentReply(self._prompts.text("prompt_too_long"), ok=False, user_message_id=user_id)
                log.info("prompt too long: retrying with the recent exchanges only",
                         extra={"conversation_id": conversation.id})
                window = self._window.compact_for_retry(window)
                retried = True
                continue
            except LLMBusy as exc:  # every slot is held by other answers: say so rather than wait on
                log.warning("LLM call not started: %s", exc, extra={"conversation_id": conversation.id})
                return AgentReply(self._prompts.text("llm_busy"), ok=False, user_message_id=user_id, failure="busy")
            except LLMError as exc:
                log.warning("LLM call failed: %s", exc, extra={"conversation_id": conversation.id})
                return AgentReply(self._prompts.text("llm_error"), ok=False, user_message_id=user_id, failure="llm")
            self._observe(window, turn, response)
            if not turn and self._prefixes is not None:
                cached = response.cache_read_input_tokens or response.cache_creation_input_tokens
                self._prefixes.sent(conversation.id, prefix if cached else None)
            read = self._read(response.text, offered)
            if response.tool_calls and rounds < self._config.agent.max_tool_rounds:
                rounds += 1
                if stream is not None:
                    stream.status(self._prompts.text("tool_status"))
                turn.append(("assistant", _as_seen(response, read.text)))
                if read.text:
                    said.append(read.text)
                results = await self._run_tools(conversation.agent_id, response.tool_calls, user_id, turn_tools,
                                                outcomes)
                turn.append(("tool", results))
                continue
            if read.imitated and not response.tool_calls:
                if not corrected:  # asked once more, told that only the system writes tool results
                    log.info("the reply imitated a tool result: asking again", extra={"conversation_id": conversation.id})
                    corrected = True
                    if stream is not None:
                        stream.status("")
                    turn.append(("imitation", response.text))
                    turn.append(("correction", self._prompts.render("agent/tool-result-imitated")))
                    continue
                log.warning("the reply imitated a tool result again: answered with an apology",
                            extra={"conversation_id": conversation.id})
                read = replace(read, text=self._prompts.text("tool_result_imitated"))
            if preview is not None:
                preview.end(read.text)
            final = read.text
            if not final and said:  # the calls ran and nothing followed: what was said beside them
                final = "\n\n".join(said)
            if response.tool_calls and not final:
                final = self._prompts.text("tool_rounds_exceeded")
            if not final:
                final = self._prompts.text("empty_reply")
            final = await self._truthful(asked, final, outcomes, user_id, turn_tools)
            final = self._cut(led_by(lead, final))
            ids, count = await self._store_turn(conversation, user_id, turn, final)
            return AgentReply(final, ok=True, user_message_id=user_id, last_message_id=ids[-1],
                              message_count=count)

    async def _truthful(
        self, asked: str, final: str, outcomes: Sequence[ToolOutcome], user_id: int, turn_tools: Sequence[ToolSet],
    ) -> str:
        """`final` with the plain line it needs when it claims a remember, reminder or change that
        no tool did, or an action failed (SPEC S34)."""
        if not asked or any(head in asked[:200] for head in self._scheduled_heads):
            return final
        can_remind = any(t.handles(SCHEDULE_TOOL) for t in (*self._tools, *turn_tools))
        kept_later = False  # the memory worker runs an explicit "remember" at once, outside incognito
        if self._config.memory.auto_summarize_enabled and self._honest.asks_to_remember(asked):
            kept_later = not await self._repos.incognito.holds(user_id)
        amended = self._honest.amend(asked, final, outcomes, can_remind=can_remind, kept_later=kept_later)
        if amended != final:
            log.info("the reply claimed an action that did not happen, or one failed: said so")
        return amended

    def _read(self, text: str, offered: frozenset[str]) -> ReadReply:
        """A reply as read: the text a person may see (S34), and whether it imitated a tool result."""
        return read_reply(text, offered, self._labels, markup=self._markup)

    @staticmethod
    def _breakpoints(messages: list[dict[str, Any]], this_turn: int) -> tuple[int, ...]:
        """Where the cached prefix ends: the last message of the previous turn; in a tool
        round also the newest message, so the next round reads this one from the cache.

        The user's message carries the time only in its own turn, so the previous turn's
        end is the longest prefix the next turn repeats word for word.
        """
        before = len(messages) - 2 - this_turn  # the user's message and this turn's tool rounds follow it
        marks = (before,) if before >= 0 else ()
        return (*marks, -1) if this_turn else marks

    async def _store_turn(
        self, conversation: ConversationRecord, user_id: int, turn: list[tuple[str, Content]], final: str,
    ) -> tuple[list[int], int]:
        turn = [(role, content) for role, content in turn if role not in _UNKEPT]
        rows: list[tuple[str, str, int, str]] = []
        for role, content in turn:
            stored_text, content_format = encode_content(content)
            rows.append((role, stored_text, self._tokens.count_content(content), content_format))
        rows.append(("assistant", final, self._tokens.count_text(final), "text"))
        ids, count = await self._repos.messages.add_turn(conversation.id, rows)
        contents = [content for _, content in turn] + [final]
        self._window.record(conversation.id, user_id, [
            HistoryItem(message_id, role, content, tokens)
            for message_id, (role, _, tokens, _), content in zip(ids, rows, contents)
        ])
        return ids, count

    async def _broken(
        self, conversation: ConversationRecord, user_id: int, turn: list[tuple[str, Content]], shown: str,
        lead: str = "",
    ) -> AgentReply:
        """A streamed answer broke off: what the user saw stays in the history, then the apology."""
        shown = shown.strip()
        if not shown:
            return AgentReply(self._prompts.text("llm_error"), ok=False, user_message_id=user_id, failure="llm")
        apology = self._prompts.text("stream_broken")
        # Cut so that with the apology after it the reply still holds no more than a cut one.
        shown = self._cut(led_by(lead, shown), room=len(REPLY_CUT_SEPARATOR) + len(apology))
        ids, count = await self._store_turn(conversation, user_id, turn, shown)
        return AgentReply(f"{shown}{REPLY_CUT_SEPARATOR}{apology}", ok=False, user_message_id=user_id,
                          last_message_id=ids[-1], message_count=count, failure="llm")

    def _cut(self, text: str, room: int = 0) -> str:
        """`text` as the chat gets it: at most the reply limit (less `room` for what follows it)."""
        limit = max(len(REPLY_CUT_SEPARATOR), self._reply_limit - room)
        if len(text) <= limit:
            return text
        log.warning("a reply of %d characters was cut to mate.channels.max-reply-chars (%d)", len(text),
                    self._reply_limit)
        return cut_reply(text, limit, self._cut_marker)

    def _observe(self, window: Window, turn: list[tuple[str, Content]], response: LLMResponse) -> None:
        raw = window.raw_tokens + sum(self._tokens.count_content(c) + PER_MESSAGE_OVERHEAD for _, c in turn)
        self._tokens.observe(self.model, raw, response.prompt_tokens)

    async def _run_tools(
        self, agent_id: int, calls: Sequence[ToolCall], asked_in: int, turn_tools: Sequence[ToolSet] = (),
        outcomes: list[ToolOutcome] | None = None,
    ) -> list[dict[str, Any]]:
        results = []
        for index, call in enumerate(calls):
            # One reply may hold many calls a model wrote out; at most max-tool-rounds of them run.
            if index < max(self._config.agent.max_tool_rounds, 1):
                result = await self._run_tool(agent_id, call, asked_in, turn_tools)
            else:
                result = ToolResult(self._prompts.text("tool_not_run"), is_error=True)
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id, "content": result.content}
            if result.is_error:
                block["is_error"] = True
            results.append(block)
            if outcomes is not None:
                outcomes.append(ToolOutcome.of(call.name, result.content, result.is_error))
        return results

    async def _run_tool(
        self, agent_id: int, call: ToolCall, asked_in: int, turn_tools: Sequence[ToolSet] = (),
    ) -> ToolResult:
        for tool_set in (*self._tools, *turn_tools):
            if tool_set.handles(call.name):
                try:
                    return await tool_set.call(agent_id, call.name, call.input, asked_in=asked_in)
                except Exception as exc:  # a tool bug goes back to the model, never up the loop
                    log.exception("tool %s failed", call.name)
                    return ToolResult(self._prompts.text("tool_bad_input", error=type(exc).__name__), True)
        return ToolResult(self._prompts.text("tool_unknown", name=call.name), is_error=True)


def _as_seen(response: LLMResponse, visible: str) -> list[dict[str, Any]]:
    """A tool round's blocks as the history keeps them: its text as a person may see it, in the
    place of the first text block (the other blocks keep their order)."""
    if visible == response.text.strip():
        return response.content
    blocks: list[dict[str, Any]] = []
    for block in response.content:
        if block.get("type") != "text":
            blocks.append(block)
        elif visible:
            blocks.append({"type": "text", "text": visible})
            visible = ""
    return blocks


def _led(reply: AgentReply, lead: str) -> AgentReply:
    return replace(reply, text=led_by(lead, reply.text)) if lead else reply
