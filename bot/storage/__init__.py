"""Storage layer: the only place with SQL."""

from __future__ import annotations

from dataclasses import dataclass

from bot.storage.agents import AgentRepository
from bot.storage.conversations import (
    ConversationRepository,
    MessageRepository,
)
from bot.storage.database import Database
from bot.storage.facts import MessageFactRepository
from bot.storage.file_history import FileHistoryRepository
from bot.storage.incognito import IncognitoRepository
from bot.storage.leases import LeaseRepository
from bot.storage.proposals import ProposalRepository
from bot.storage.memory_commit import MemoryCommitRepository
from bot.storage.people import PersonRepository
from bot.storage.memory_state import (
    MemoryPendingRepository,
    MemoryRunRepository,
)
from bot.storage.postgres.database import PostgresDatabase
from bot.storage.postgres.search import PostgresSearchIndex, PostgresSearchRepository
from bot.storage.search import SearchIndex, SearchRepository, SqliteSearchRepository
from bot.storage.search_index import SqliteSearchIndex
from bot.storage.sql import SqlDatabase
from bot.storage.tasks import TaskRepository
from bot.storage.usage import LlmUsageRepository
from bot.storage.workspace_files import WorkspaceFileRepository


@dataclass(frozen=True, slots=True)
class Repositories:
    """Every repository over one open database (SQLite or PostgreSQL)."""

    agents: AgentRepository
    conversations: ConversationRepository
    messages: MessageRepository
    workspace_files: WorkspaceFileRepository
    memory_pending: MemoryPendingRepository
    memory_runs: MemoryRunRepository
    memory_commits: MemoryCommitRepository
    llm_usage: LlmUsageRepository
    search: SearchRepository
    search_index: SearchIndex
    people: PersonRepository
    tasks: TaskRepository
    file_history: FileHistoryRepository
    incognito: IncognitoRepository
    proposals: ProposalRepository
    leases: LeaseRepository
    facts: MessageFactRepository

    @classmethod
    def over(cls, db: SqlDatabase) -> Repositories:
        search: SearchRepository
        search_index: SearchIndex
        if isinstance(db, PostgresDatabase):
            search, search_index = PostgresSearchRepository(db), PostgresSearchIndex(db)
        elif isinstance(db, Database):
            search, search_index = SqliteSearchRepository(db), SqliteSearchIndex(db)
        else:
            raise TypeError(f"no search for {type(db).__name__}")
        return cls(
            agents=AgentRepository(db),
            conversations=ConversationRepository(db),
            messages=MessageRepository(db),
            workspace_files=WorkspaceFileRepository(db),
            memory_pending=MemoryPendingRepository(db),
            memory_runs=MemoryRunRepository(db),
            memory_commits=MemoryCommitRepository(db),
            llm_usage=LlmUsageRepository(db),
            search=search,
            search_index=search_index,
            people=PersonRepository(db),
            tasks=TaskRepository(db),
            file_history=FileHistoryRepository(db),
            incognito=IncognitoRepository(db),
            proposals=ProposalRepository(db),
            leases=LeaseRepository(db),
            facts=MessageFactRepository(db),
        )


__all__ = ["Database", "PostgresDatabase", "Repositories", "SqlDatabase"]
