"""ConversationWindowManager: what the model sees of a conversation, compacted as it grows (SPEC S5)."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from bot.core.config import WindowConfig
from bot.core.content.messages import (
    Content,
    HistoryItem,
    history_items,
    split_exchanges,
    to_api_messages,
    trim_units,
    with_note,
    with_time,
)
from bot.llm.tokens import PER_MESSAGE_OVERHEAD, TIME_LABEL_TOKENS, TokenEstimator
from bot.core.content.transcript import COMPACTION, TranscriptRenderer
from bot.core.errors import LLMError
from bot.llm import LLMClient, LLMRequest
from bot.llm.chat_prefix import ChatPrefix
from bot.core.prompts import PromptLibrary
from bot.storage import Repositories
from bot.core.records import ConversationRecord
from memory.events import MemoryEventSink

log = logging.getLogger(__name__)

_PAGE = 256
_HISTORY_CACHE_CHARS = 20_000_000
_QUIET_FOLD_MIN_RATIO = 4  # a quiet fold must replace this many times the summary's own length


@dataclass(frozen=True, slots=True)
class MessageTooLong:
    """The current message alone does not fit the budget: answer without calling the LLM."""

    tokens: int
    budget: int


@dataclass(slots=True)
class Window:
    system: str
    tools: list[dict[str, Any]]
    summary: str | None
    history: list[HistoryItem]
    current: list[HistoryItem]
    raw_tokens: int
    budget: int
    model: str
    compacted: bool = False
    trimmed: int = 0
    # What changed in the memory files since the system prompt above was built: sent with the
    # current message only (bot/llm/memory_snapshot.py).
    memory_note: str = ""


@dataclass(slots=True)
class _CachedHistory:
    """Messages (cutoff, last_id] of a conversation, as last loaded or recorded."""

    cutoff: int
    last_id: int
    items: list[HistoryItem]
    chars: int


# Memory notes kept for re-sending; past this the oldest go (their turns then read without it).
_MAX_NOTES = 4096


def _item_tokens(item: HistoryItem) -> int:
    return item.tokens + PER_MESSAGE_OVERHEAD


def _chars(items: list[HistoryItem]) -> int:
    return sum(len(i.content) if isinstance(i.content, str) else 200 * len(i.content) for i in items)


@dataclass(frozen=True, slots=True)
class CompactionResult:
    folded: int
    before_tokens: int
    after_tokens: int
    cache_read: int | None = None  # a quiet fold: what it read from the prompt cache (0: a miss)


class ConversationWindowManager:
    """Builds each request: system, summary (as a user message), history since the cut-off, current."""

    def __init__(
        self, config: WindowConfig, repos: Repositories, tokens: TokenEstimator, llm: LLMClient,
        prompts: PromptLibrary, memory: MemoryEventSink, *, summary_model: str,
        clock: Callable[[], float] = time.monotonic, time_label: Callable[[str], str] | None = None,
    ) -> None:
        self._config = config
        self._repos = repos
        self._tokens = tokens
        self._llm = llm
        self._prompts = prompts
        self._transcript = TranscriptRenderer(prompts)
        self._memory = memory
        self._summary_model = summary_model
        self._clock = clock
        self._time_label = time_label
        # The memory note each user message was sent with, by message id: later turns send it
        # again, so the history reads as it did in the request that cached it (process memory
        # only, like the snapshot the note comes from).
        self._notes: OrderedDict[int, str] = OrderedDict()
        self._summaries: dict[str, tuple[str | None, int, float]] = {}
        # Each active conversation's window, kept current by the agent's own writes so a
        # turn need not read it back; a stored turn whose predecessor is not the cached last
        # message (someone else wrote) drops the entry. Bounded by total characters.
        self._histories: OrderedDict[str, _CachedHistory] = OrderedDict()
        self._history_chars = 0
        self.summary_calls = 0

    @property
    def budget(self) -> int:
        return self._config.default_max_input_tokens

    @property
    def trigger(self) -> int:
        """The whole request (system, tools, conversation) is compacted past this share of the model's limit."""
        return int(self._config.default_max_input_tokens * self._config.compact_trigger_ratio)

    @property
    def working_tokens(self) -> int:
        """The conversation (summary, history, the new message) is compacted past this, whatever
        the model's limit: every request re-sends it, so its size is what a message costs."""
        return self._config.working_tokens

    @property
    def _load_limit(self) -> int:
        # History past either limit is folded anyway: reading more of it is wasted work.
        return min(self.budget, self.working_tokens)

    # -- summary state ----------------------------------------------------------------

    async def _summary_of(self, conversation: ConversationRecord) -> tuple[str | None, int]:
        """The rolling summary and its cut-off: this manager is its only writer, so the
        in-memory copy is authoritative while cached; on a miss it is read afresh (the
        caller's record may be an older snapshot)."""
        cached = self._summaries.get(conversation.id)
        if cached and cached[2] > self._clock():
            return cached[0], cached[1]
        fresh = await self._repos.conversations.get(conversation.id) or conversation
        self._remember_summary(conversation.id, fresh.summary, fresh.summary_upto_message_id)
        return fresh.summary, fresh.summary_upto_message_id

    def _remember_summary(self, conversation_id: str, summary: str | None, upto: int) -> None:
        ttl = self._config.summary_cache_minutes * 60
        self._summaries[conversation_id] = (summary, upto, self._clock() + ttl)
        if len(self._summaries) > 10_000:  # a long-running daemon must not grow without bound
            now = self._clock()
            self._summaries = {k: v for k, v in self._summaries.items() if v[2] > now}

    def forget(self, conversation_id: str) -> None:
        self._summaries.pop(conversation_id, None)
        self._drop_history(conversation_id)

    def folded(self, conversation_id: str, summary: str, upto: int) -> None:
        """The stored summary now covers the messages up to `upto`: the cached window keeps
        the rest, so the turn after a compaction does not read its window back."""
        self._remember_summary(conversation_id, summary, upto)
        entry = self._histories.get(conversation_id)
        if entry is None:
            return
        if not entry.cutoff <= upto <= entry.last_id:  # not the window the cache holds
            self._drop_history(conversation_id)
            return
        kept = [i for i in entry.items if i.id > upto]
        self._store_history(conversation_id, _CachedHistory(upto, entry.last_id, kept, _chars(kept)))

    # -- history cache ----------------------------------------------------------------

    def _drop_history(self, conversation_id: str) -> None:
        entry = self._histories.pop(conversation_id, None)
        if entry is not None:
            self._history_chars -= entry.chars

    def _store_history(self, conversation_id: str, entry: _CachedHistory) -> None:
        self._drop_history(conversation_id)
        self._histories[conversation_id] = entry
        self._history_chars += entry.chars
        while self._history_chars > _HISTORY_CACHE_CHARS and len(self._histories) > 1:
            _, oldest = self._histories.popitem(last=False)
            self._history_chars -= oldest.chars

    def record(self, conversation_id: str, previous_id: int, items: list[HistoryItem]) -> None:
        """Messages just stored after `previous_id`: extend the cached window, or drop it."""
        entry = self._histories.get(conversation_id)
        if entry is None or not items:
            return
        if entry.last_id != previous_id:
            self._drop_history(conversation_id)
            return
        entry.items.extend(items)
        entry.last_id = items[-1].id
        added = _chars(items)
        entry.chars += added
        self._history_chars += added
        self._histories.move_to_end(conversation_id)

    def check_fits(self, system: str, tools: list[dict[str, Any]], tokens: int, model: str) -> MessageTooLong | None:
        """Whether a message of `tokens` can be sent at all, before anything is stored."""
        fixed = self._tokens.count_text(system) + self._tokens.count_tools(tools) + tokens + PER_MESSAGE_OVERHEAD
        if self._tokens.calibrated(model, fixed) > self.budget:
            return MessageTooLong(tokens=tokens, budget=max(self.budget - (fixed - tokens), 0))
        return None

    def summary_message(self, summary: str) -> str:
        return f"{self._prompts.text('summary_prefix')}\n{summary}"

    # -- building ---------------------------------------------------------------------

    def _cached_history(self, conversation_id: str, cutoff: int, previous_id: int | None) -> tuple[list[HistoryItem], bool]:
        entry = self._histories.get(conversation_id)
        if entry is None or previous_id is None or entry.cutoff != cutoff or entry.last_id != previous_id:
            return [], False
        self._histories.move_to_end(conversation_id)
        return list(entry.items), True

    async def _load_history(self, conversation_id: str, after_id: int, before_id: int, limit_tokens: int) -> tuple[list[HistoryItem], bool]:
        """Newest-first pages until the token limit is passed; (items oldest first, complete?)."""
        items: list[HistoryItem] = []
        total = 0
        upto = before_id - 1
        while True:
            page = history_items(await self._repos.messages.window_page(
                conversation_id, _PAGE, after_id=after_id, upto_id=upto))
            items[:0] = page
            total += sum(i.tokens for i in page) + PER_MESSAGE_OVERHEAD * len(page)
            if len(page) < _PAGE:
                return items, True
            if total > limit_tokens:
                return items, False
            upto = page[0].id - 1

    def _estimate(self, window: Window) -> int:
        raw = self._tokens.count_text(window.system) + self._tokens.count_tools(window.tools)
        if window.summary:
            raw += self._tokens.count_message(self.summary_message(window.summary))
        raw += sum(self._history_tokens(i) for i in window.history)
        raw += sum(_item_tokens(i) + (TIME_LABEL_TOKENS if i.time else 0) for i in window.current)
        return raw

    def _history_tokens(self, item: HistoryItem) -> int:
        """An earlier message as it is sent again, with its memory note (its time label, about
        TIME_LABEL_TOKENS, is left to the calibration from reported usage, as before)."""
        tokens = _item_tokens(item)
        note = self._notes.get(item.id)
        return tokens + self._tokens.count_text(note) if note else tokens

    def _calibrated(self, window: Window) -> int:
        return self._tokens.calibrated(window.model, window.raw_tokens)

    async def build(
        self, conversation: ConversationRecord, system: str, current: list[HistoryItem],
        tools: list[dict[str, Any]], model: str, *, previous_id: int | None = None,
    ) -> Window | MessageTooLong:
        """The request for this turn; compacts first when the estimate passes the trigger.

        `previous_id` (the id of the conversation's last message before `current`, as the
        insert reported it) lets a cached window be used without reading it back.
        """
        summary, cutoff = await self._summary_of(conversation)
        first_current = min((i.id for i in current), default=1 << 62)
        history, complete = self._cached_history(conversation.id, cutoff, previous_id)
        if not complete:
            history, complete = await self._load_history(conversation.id, cutoff, first_current, self._load_limit)
            consistent = history[-1].id == previous_id if history else (previous_id or 0) <= cutoff
            if complete and previous_id is not None and consistent:
                self._store_history(conversation.id, _CachedHistory(cutoff, previous_id, list(history),
                                                                    _chars(history)))
        window = Window(system, tools, summary, history, current, 0, self.budget, model)
        window.raw_tokens = self._estimate(window)
        fixed = window.raw_tokens - sum(self._history_tokens(i) for i in history)
        fixed -= self._tokens.count_message(self.summary_message(summary)) if summary else 0
        if self._tokens.calibrated(model, fixed) > self.budget:
            own = sum(i.tokens for i in current)
            return MessageTooLong(tokens=own, budget=max(self.budget - (fixed - own), 0))
        if not complete or self._over_trigger(window):
            result = await self._fold(conversation, window)
            if result is not None:
                window.compacted = True
        if self._calibrated(window) > self.budget:
            self._trim_to_fit(window)
        return window

    def _over_trigger(self, window: Window) -> bool:
        """Compaction is due when the request passes the share of the model's limit, or the
        conversation in it passes the working window, whichever comes first."""
        if self._calibrated(window) > self.trigger:
            return True
        fixed = self._tokens.count_text(window.system) + self._tokens.count_tools(window.tools)
        return self._tokens.calibrated(window.model, window.raw_tokens - fixed) > self.working_tokens

    def assemble(self, window: Window, extra: list[tuple[str, Content]] = ()) -> list[dict[str, Any]]:  # type: ignore[assignment]
        parts: list[tuple[str, Content]] = []
        if window.summary:
            parts.append(("user", self.summary_message(window.summary)))
        history = window.history
        if history and not self._may_lead(window, history[0]):
            # The first turn must be the user's own words, and a tool_result never outlives
            # its tool_use: drop whatever trimming left leading (a tool exchange goes whole).
            units = trim_units(history)
            while units and not self._may_lead(window, units[0][0]):
                units.pop(0)
            history = [i for u in units for i in u]
        parts += [(i.api_role, self._as_sent_before(i)) for i in history]
        current = [(i.api_role, self._timed(i)) for i in window.current]
        if window.memory_note and current and current[0][0] == "user":
            current[0] = ("user", with_note(window.memory_note, current[0][1]))
            self._keep_note(window.current[0].id, window.memory_note)
        parts += current
        parts += list(extra)
        return to_api_messages(parts)

    def _timed(self, item: HistoryItem) -> Content:
        """A user message with the local time it was sent: derived from the stored time alone,
        so every later request shows it the same (the provider's prompt cache needs that)."""
        if item.role != "user" or not item.time or self._time_label is None:
            return item.content
        return with_time(item.content, self._time_label(item.time))

    def _as_sent_before(self, item: HistoryItem) -> Content:
        """An earlier message exactly as the request that carried it as the current one had it."""
        content = self._timed(item)
        note = self._notes.get(item.id) if item.role == "user" else None
        return with_note(note, content) if note else content

    def _keep_note(self, message_id: int, note: str) -> None:
        self._notes[message_id] = note
        self._notes.move_to_end(message_id)
        while len(self._notes) > _MAX_NOTES:
            self._notes.popitem(last=False)

    @staticmethod
    def _may_lead(window: Window, item: HistoryItem) -> bool:
        return item.role == "user" or (bool(window.summary) and item.role == "assistant")

    def _trim_to_fit(self, window: Window) -> None:
        """Drop history from the front, whole tool exchanges at a time, keeping the last 2 messages."""
        units = trim_units(window.history)
        keep_at_least = max(2 - len(window.current), 0)
        while units and self._calibrated(window) > self.budget:
            remaining = sum(len(u) for u in units)
            if remaining - len(units[0]) < keep_at_least:
                break
            dropped = units.pop(0)
            window.trimmed += len(dropped)
            window.history = [i for u in units for i in u]
            window.raw_tokens = self._estimate(window)
        if window.trimmed:
            log.info("trimmed %d messages to fit the window", window.trimmed)

    def compact_for_retry(self, window: Window) -> Window:
        """PTL emergency: system, summary and the last exchanges only, without an LLM call."""
        exchanges = split_exchanges(window.history)
        keep = exchanges[-self._config.preserve_recent_pairs:] if self._config.preserve_recent_pairs else []
        retry = Window(window.system, window.tools, window.summary, [i for e in keep for i in e],
                       window.current, 0, window.budget, window.model, window.compacted)
        retry.raw_tokens = self._estimate(retry)
        return retry

    async def usage(self, conversation: ConversationRecord, system: str, tools: list[dict[str, Any]], model: str) -> int:
        """Calibrated tokens the next request would start from (for /status)."""
        summary, cutoff = await self._summary_of(conversation)
        history, _ = await self._load_history(conversation.id, cutoff, 1 << 62, self.budget)
        window = Window(system, tools, summary, history, [], 0, self.budget, model)
        window.raw_tokens = self._estimate(window)
        return self._calibrated(window)

    # -- compaction -------------------------------------------------------------------

    async def compact_now(self, conversation: ConversationRecord, system: str, tools: list[dict[str, Any]], model: str) -> CompactionResult | None:
        """/compact: fold everything but the recent exchanges, whatever the size."""
        summary, cutoff = await self._summary_of(conversation)
        history, _ = await self._load_history(conversation.id, cutoff, 1 << 62, self.budget)
        window = Window(system, tools, summary, history, [], 0, self.budget, model)
        window.raw_tokens = self._estimate(window)
        return await self._fold(conversation, window)

    async def fold_quiet(self, conversation: ConversationRecord, prefix: ChatPrefix) -> CompactionResult | None:
        """Fold a conversation that went quiet, through the prompt cache its last turn left warm.

        The request repeats that turn's prefix (model, tools, system prompt, summary, history)
        byte for byte and asks for the summary after it, so the history is read at the cache's
        price; the next session then writes the summary and the recent exchanges to the cache,
        not the whole history again. None: too little to fold, or the answer was no summary.
        """
        summary, cutoff = await self._summary_of(conversation)
        entry = self._histories.get(conversation.id)
        if entry is not None and entry.cutoff == cutoff:  # what the last turn sent
            history = list(entry.items)
        else:
            history, complete = await self._load_history(conversation.id, cutoff, 1 << 62, self._load_limit)
            if not complete:
                return None  # past the working window: the next turn's compaction folds it
        if not prefix.continued_by(summary, tuple(i.id for i in history)) \
                or history[-1].id != await self._repos.messages.last_id(conversation.id):
            return None  # changed since the last turn (deleted, compacted, written elsewhere): a miss
        window = Window(prefix.system, prefix.tools, summary, history, [], 0, self.budget, prefix.model)
        window.raw_tokens = self._estimate(window)
        exchanges = split_exchanges(history)
        pairs = self._config.preserve_recent_pairs
        folded = sum(_item_tokens(i) for e in (exchanges[:-pairs] if pairs else exchanges) for i in e)
        # A fold is paid with a summary written out (output, 5x input); it pays back only once
        # it replaces clearly more than it writes.
        if folded < _QUIET_FOLD_MIN_RATIO * self._config.summary_max_tokens:
            return None

        read = 0

        async def through_cache() -> str:
            nonlocal read
            self.summary_calls += 1
            messages = self.assemble(window)
            messages.append({"role": "user", "content": self._prompts.render(
                "context/conversation-fold-user", max_tokens=self._config.summary_max_tokens, kept_exchanges=pairs)})
            # tool_choice stays the chat's: changing it would void the cached messages; the
            # prompt asks for no tool, and a tool call is taken as no summary.
            response = await self._llm.complete(LLMRequest(
                model=prefix.model, system=prefix.system, messages=messages,
                max_tokens=self._config.summary_max_tokens, tools=prefix.tools, purpose="summary",
                agent_id=conversation.agent_id, conversation_id=conversation.id,
                system_split=prefix.split, cache_messages=(len(messages) - 2,), cache_ttl=prefix.ttl))
            if response.tool_calls:
                raise LLMError("the summary came back as a tool call")
            read = response.cache_read_input_tokens
            return _summary_text(response.text)

        result = await self._fold(conversation, window, through_cache)
        return replace(result, cache_read=read) if result is not None else None

    async def _fold(
        self, conversation: ConversationRecord, window: Window,
        summarize: Callable[[], Awaitable[str]] | None = None,
    ) -> CompactionResult | None:
        exchanges = split_exchanges(window.history)
        pairs = self._config.preserve_recent_pairs
        kept = exchanges[-pairs:] if pairs else []
        if len(kept) >= len(exchanges) and window.history and window.history[0].id == (kept[0][0].id if kept else -1):
            return None
        kept_items = [i for e in kept for i in e]
        boundary = (kept_items[0].id if kept_items else min((i.id for i in window.current), default=1 << 62))
        _, cutoff = await self._summary_of(conversation)
        upto = await self._last_id_before(conversation.id, cutoff, boundary)
        if upto is None:
            return None
        before = self._calibrated(window)
        fresh = await self._repos.conversations.get(conversation.id)
        if fresh is not None and fresh.memory_upto_message_id < upto:
            try:  # a durable pending row; the reply waits only for the summary call
                await self._memory.record_fold(conversation.agent_id, conversation.id, upto)
            except Exception:  # memory must never block the reply; the watermark keeps the work
                log.warning("recording the folded messages for memory extraction failed", exc_info=True)
        try:
            if summarize is None:
                summary = await self._summarize_range(conversation.id, window.summary, cutoff, upto)
            else:
                summary = await summarize()
        except LLMError as exc:
            log.warning("the summary failed, the conversation is left as it was: %s", exc)
            return None
        await self._repos.conversations.set_summary(conversation.id, summary, upto)
        self.folded(conversation.id, summary, upto)
        folded = sum(1 for i in window.history if i.id <= upto)
        window.summary = summary
        window.history = kept_items
        window.raw_tokens = self._estimate(window)
        log.info("compacted conversation: folded %d messages", folded, extra={"conversation_id": conversation.id})
        return CompactionResult(folded, before, self._calibrated(window))

    async def _last_id_before(self, conversation_id: str, after_id: int, boundary: int) -> int | None:
        page = await self._repos.messages.latest(conversation_id, 1, after_id=after_id, upto_id=boundary - 1)
        return page[-1].id if page else None

    async def _summarize_range(self, conversation_id: str, previous: str | None, after_id: int, upto: int) -> str:
        """Fold (after_id, upto] into the previous summary, in chunks that fit one request."""
        summary = previous or ""
        chunk_limit = max(self.budget // 2, 512)
        cursor = after_id
        while cursor < upto:
            page = await self._repos.messages.oldest(conversation_id, _PAGE, after_id=cursor, upto_id=upto)
            if not page:
                break
            lines: list[str] = []
            used = 0
            for record in page:
                line = self._transcript.line(record, COMPACTION)
                cost = record.token_count + PER_MESSAGE_OVERHEAD
                if lines and used + cost > chunk_limit:
                    break
                if line:
                    lines.append(line)
                used += cost
                cursor = record.id
            if lines:
                summary = await self._summarize(summary, "\n".join(lines))
        return summary

    async def _summarize(self, previous: str, transcript: str) -> str:
        request = LLMRequest(
            model=self._summary_model,
            system=self._prompts.render("context/conversation-summary-system",
                                        max_tokens=self._config.summary_max_tokens),
            messages=[{"role": "user", "content": self._prompts.render(
                "context/conversation-summary-user", previous_summary=previous, transcript=transcript)}],
            max_tokens=self._config.summary_max_tokens,
            purpose="summary",
        )
        self.summary_calls += 1
        response = await self._llm.complete(request)
        return _summary_text(response.text)


def _summary_text(answer: str) -> str:
    text = answer.strip()
    if not text:
        raise LLMError("the summary came back empty")
    return text
