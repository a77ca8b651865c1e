"""ConsolidationTurns: the nightly review's turns, whose memory-tool writes belong to a consolidation run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from bot.storage import Repositories
from memory.consolidation.emergence import RUN_KIND


@dataclass(slots=True)
class TurnOutcome:
    """How the turn went, set by whoever ran it; a turn that raised is recorded as failed anyway."""

    status: str = "completed"
    reason: str | None = None


class ConsolidationTurns:
    """The nightly job runs the agent on its review message; what the agent then writes with its
    memory tool is that night's consolidation, recorded in the file history as `emergence` with
    the run it belongs to (not as an ordinary tool write) and in the memory runs like one."""

    def __init__(self, repos: Repositories) -> None:
        self._repos = repos
        self._runs: dict[str, int] = {}  # chat key -> run id, while its turn runs

    @asynccontextmanager
    async def running(self, agent_id: int, chat_key: str) -> AsyncIterator[TurnOutcome]:
        """Around the turn the nightly job runs in the chat `chat_key` (a chat of its own)."""
        run_id = await self._repos.memory_runs.start(agent_id, RUN_KIND, chat_key)
        self._runs[chat_key] = run_id
        outcome = TurnOutcome()
        error: str | None = None
        try:
            yield outcome
        except BaseException as exc:
            outcome.status, error = "failed", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            del self._runs[chat_key]
            await self._repos.memory_runs.finish(run_id, outcome.status, outcome.reason, error)

    async def run_of(self, message_id: int) -> int | None:
        """The consolidation run whose turn the message belongs to, if any."""
        if not self._runs:  # the usual case: no nightly turn running, nothing to look up
            return None
        chat_key = await self._repos.messages.chat_key_of(message_id)
        return self._runs.get(chat_key) if chat_key is not None else None
