"""QuietFolds: a direct conversation that has gone quiet is folded while its prompt cache is still warm.

A person comes back after an hour or three. Without this, the first turn of that session
writes the whole history to the provider's cache again (at 1.25-2x the input price), and
every turn after it reads all of it. Folded shortly before the cache expires, through that
very cache (ConversationWindowManager.fold_quiet), the history is read once at a tenth of the
price and the next session starts from the summary and the last exchanges.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any

from bot.conversation.window import ConversationWindowManager
from bot.core.clock import Clock, utc_now
from bot.core.records import ConversationRecord
from bot.core.retry import Sleep
from bot.llm.chat_prefix import ChatPrefixes
from bot.storage import Repositories

log = logging.getLogger(__name__)

_MISSES_BEFORE_STOPPING = 3

# The turn lock of a chat, by its key: a fold never runs beside a turn of the same chat.
HoldChat = Callable[[str], AbstractAsyncContextManager[Any]]


class QuietFolds:
    """One timer per direct conversation, restarted by each answered turn (process memory only:
    after a restart the cache this reads from is not known, and the next turn folds as usual)."""

    def __init__(
        self, window: ConversationWindowManager, prefixes: ChatPrefixes, repos: Repositories, *,
        model: str, quiet_minutes: float, clock: Clock = utc_now, sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._window = window
        self._prefixes = prefixes
        self._repos = repos
        self._model = model
        self._quiet = timedelta(minutes=quiet_minutes)
        self._clock = clock
        self._sleep = sleep
        self._due: dict[str, asyncio.Task[None]] = {}
        self._folding = 0  # timers that woke and are folding now
        self._misses = 0  # folds in a row that read nothing from the cache
        self._closed = False

    def heard(self, conversation: ConversationRecord, hold: HoldChat) -> None:
        """A turn of `conversation` was answered: its quiet time starts again."""
        if self._closed or self._quiet <= timedelta(0) or conversation.is_group:  # a group's prompt is rebuilt each turn
            return
        previous = self._due.pop(conversation.id, None)
        if previous is not None:
            previous.cancel()
        self._due[conversation.id] = asyncio.create_task(
            self._when_quiet(conversation.id, self._clock() + self._quiet, hold(conversation.chat_key)),
            name=f"quiet-fold-{conversation.id}")

    async def _when_quiet(self, conversation_id: str, at: datetime, chat_turn: AbstractAsyncContextManager[Any]) -> None:
        await self._sleep(max(0.0, (at - self._clock()).total_seconds()))
        self._folding += 1
        try:
            async with chat_turn:
                conversation = await self._repos.conversations.get(conversation_id)  # /new may have come first
                if conversation is None or conversation.archived or not self._current(conversation_id):
                    return  # archived, or a turn came while this waited for the chat
                prefix = self._prefixes.warm(conversation_id, self._model, self._clock(), history=True)
                if prefix is None:  # the cache is gone: folding now would read the history at full price
                    return
                result = await self._window.fold_quiet(conversation, prefix)
                if result is not None:
                    log.info("folded a quiet conversation: %d messages, %d -> %d tokens", result.folded,
                             result.before_tokens, result.after_tokens, extra={"conversation_id": conversation_id})
                    self._judge(result.cache_read or 0)
        except Exception:  # boundary: a fold is an economy; the next turn compacts as usual
            log.warning("folding a quiet conversation failed", exc_info=True, extra={"conversation_id": conversation_id})
        finally:
            self._folding -= 1
            if self._current(conversation_id):
                del self._due[conversation_id]

    def _judge(self, cache_read: int) -> None:
        """A fold that read nothing from the cache cost more than it saves; a server that keeps
        missing (a gateway that drops the hour-long lifetime, say) gets no more of them."""
        self._misses = 0 if cache_read else self._misses + 1
        if self._misses >= _MISSES_BEFORE_STOPPING:
            log.warning("quiet folds stop: the last %d read nothing from the prompt cache", self._misses)
            self._quiet = timedelta(0)

    def _current(self, conversation_id: str) -> bool:
        return self._due.get(conversation_id) is asyncio.current_task()

    @property
    def waiting(self) -> int:
        """Conversations whose quiet time is being counted."""
        return sum(1 for task in self._due.values() if not task.done())

    async def drain(self, timeout: float) -> bool:
        """Wait until no fold is running (timers still sleeping are not waited for)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # A timer whose sleep has just ended runs (and counts itself) at the loop's next turn.
        await asyncio.sleep(0)
        while self._folding:
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._due.values())
        self._due.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
