"""Storage layer: the only place with SQL."""

from __future__ import annotations

from dataclasses import dataclass

from bot.storage.agents import SqliteAgentRepository
from bot.storage.conversations import (
    SqliteConversationRepository,
    SqliteMessageRepository,
)
from bot.storage.database import Database
from bot.storage.file_history import SqliteFileHistoryRepository
from bot.storage.incognito import SqliteIncognitoRepository
from bot.storage.proposals import SqliteProposalRepository
from bot.storage.memory_commit import SqliteMemoryCommitRepository
from bot.storage.people import SqlitePersonRepository
from bot.storage.memory_state import (
    SqliteMemoryPendingRepository,
    SqliteMemoryRunRepository,
)
from bot.storage.search import SqliteSearchRepository
from bot.storage.search_index import SqliteSearchIndex
from bot.storage.tasks import SqliteTaskRepository
from bot.storage.usage import SqliteLlmUsageRepository
from bot.storage.workspace_files import SqliteWorkspaceFileRepository


@dataclass(frozen=True, slots=True)
class Repositories:
    """Every repository over one open Database."""

    agents: SqliteAgentRepository
    conversations: SqliteConversationRepository
    messages: SqliteMessageRepository
    workspace_files: SqliteWorkspaceFileRepository
    memory_pending: SqliteMemoryPendingRepository
    memory_runs: SqliteMemoryRunRepository
    memory_commits: SqliteMemoryCommitRepository
    llm_usage: SqliteLlmUsageRepository
    search: SqliteSearchRepository
    search_index: SqliteSearchIndex
    people: SqlitePersonRepository
    tasks: SqliteTaskRepository
    file_history: SqliteFileHistoryRepository
    incognito: SqliteIncognitoRepository
    proposals: SqliteProposalRepository

    @classmethod
    def over(cls, db: Database) -> Repositories:
        return cls(
            agents=SqliteAgentRepository(db),
            conversations=SqliteConversationRepository(db),
            messages=SqliteMessageRepository(db),
            workspace_files=SqliteWorkspaceFileRepository(db),
            memory_pending=SqliteMemoryPendingRepository(db),
            memory_runs=SqliteMemoryRunRepository(db),
            memory_commits=SqliteMemoryCommitRepository(db),
            llm_usage=SqliteLlmUsageRepository(db),
            search=SqliteSearchRepository(db),
            search_index=SqliteSearchIndex(db),
            people=SqlitePersonRepository(db),
            tasks=SqliteTaskRepository(db),
            file_history=SqliteFileHistoryRepository(db),
            incognito=SqliteIncognitoRepository(db),
            proposals=SqliteProposalRepository(db),
        )


__all__ = ["Database", "Repositories"]
