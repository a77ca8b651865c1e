"""Builds the conversation pipeline (LLM, window, agent, router, commands) over a Core."""

from __future__ import annotations

import asyncio
import gc
import socket
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from bot.conversation.access import AccessPolicies
from bot.conversation.agent import Agent
from bot.app.core import Core, open_core
from bot.conversation.commands.handler import CommandHandler
from bot.core.config import Config, MediaConfig
from bot.llm.chat_prefix import ChatPrefixes
from bot.conversation.quiet_fold import QuietFolds
from bot.llm.tokens import TokenEstimator
from bot.conversation.window import ConversationWindowManager
from bot.core.clock import Clock, MinuteLabels, utc_now
from bot.llm import AnthropicClient, LLMClient, OfflineClient, OpenAIClient
from bot.llm import UsageRecordingClient
from bot.media.preparer import MediaPreparer
from bot.conversation.people import shared_owner_memory
from bot.llm import TextToolCallClient
from bot.llm.context_probe import fitted_window, probe_context
from bot.core.retry import Sleep
from bot.core.tools import offered
from bot.conversation.router import ChannelMessageRouter
from bot.schedule.reminders.delivery import ChannelOutbox
from bot.schedule.reminders.service import TaskService
from bot.features.search import SearchFeature
from bot.schedule.reminders.tool import TurnTaskTools
from bot.media.transcription import OpenAITranscriber
from bot.media.voice import VoiceNoteReader
from channels.base import ChannelStateBoard
from bot.storage.leases import Leases
from bot.storage.embeddings import EmbeddingRepository
from memory.consolidation.turns import ConsolidationTurns
from memory.recall.builtin import BuiltinEmbedder, BuiltinUnavailable
from memory.recall.embeddings import (
    BATCH_SIZE as EMBEDDING_BATCH,
    EmbeddingBackfill,
    EmbeddingClient,
    EndpointHealth,
    OpenAIEmbeddingClient,
    SemanticSearch,
)
from memory.consolidation.emergence import MemoryEmergenceService
from memory.events import MemoryEventSink, NullMemorySink
from memory.trust.receipts import MemoryReceipts
from memory.consolidation.review import ConsolidationReview, OwnerChannel
from memory.recall.search import MemorySearchService
from memory.recall.tool import SHORT_DESCRIPTIONS as SEARCH_TOOL_LINES
from memory.recall.tool import MemorySearchTool
from memory.extraction.summarization import MemorySummarizationService
from memory.workspace.tool import SHORT_DESCRIPTIONS as MEMORY_TOOL_LINES
from memory.workspace.tool import WorkspaceMemoryTool
from memory.worker import MemoryWorker
from memory.workspace.service import MEMORY_FILE, PROFILE_FILE

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MemoryServices:
    """The memory work beside the conversations; a runtime opened without the worker has none."""

    summarization: MemorySummarizationService
    worker: MemoryWorker  # the durable queue in front of `summarization`; /memory summarize runs through it
    emergence: MemoryEmergenceService
    review: ConsolidationReview  # /memory approve | reject, and the web page's proposal


@dataclass(slots=True)
class Runtime:
    """Everything a conversation needs, built once by open_runtime."""

    core: Core
    llm: LLMClient
    tokens: TokenEstimator
    window: ConversationWindowManager
    agent: Agent
    router: ChannelMessageRouter
    commands: CommandHandler
    memory: MemoryEventSink  # the worker, or a sink that drops events when there is none
    offline: bool
    channel_states: ChannelStateBoard
    access: AccessPolicies
    memory_tool: WorkspaceMemoryTool
    search: SearchFeature  # the API's and /memory search's (semantic when configured)
    memory_services: MemoryServices | None
    tasks: TaskService  # reminders: the tools, /tasks, the API; the daemon's timer fires them
    outbox: ChannelOutbox  # messages the daemon sends on its own (reminders, memory receipts), by channel
    consolidation_turns: ConsolidationTurns  # the nightly review's turns: their memory writes are its run's
    clock: Clock = utc_now  # open_runtime's: what the daemon's services started later keep too
    leases: Leases | None = None  # several daemons on one database (PostgreSQL): who does what


YOUNG_GC_THRESHOLD = 20_000


def tune_garbage_collector() -> None:
    """Once per process, after start-up: keep the collector's pauses out of the replies.

    - What start-up built (modules, the SDK's models, templates, config) lives as long as
      the process; frozen, it is no longer walked by every full collection.
    - The young generation is collected after 20 000 new objects instead of 700: a reply
      makes a few hundred, so collections come ~30x less often, each still short.
    Measured (bench/concurrency, N=500): ratio 0.93 -> 0.95-0.96. Garbage left at the
    freeze stays for good, so this is done once, when start-up is over.
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, middle, old)


def make_llm(config: Config) -> AnthropicClient | OpenAIClient | OfflineClient:
    """The client for `mate.llm.api`; the only place that knows which protocol is in use."""
    llm = config.mate.llm
    if not llm.uses_anthropic:
        return OfflineClient()
    if llm.protocol == "openai":
        return OpenAIClient(llm)
    return AnthropicClient(llm)


@asynccontextmanager
async def open_runtime(
    config: Config, *, llm: LLMClient | None = None, with_memory_worker: bool = True,
    clock: Clock = utc_now, sleep: Sleep = asyncio.sleep,
) -> AsyncIterator[Runtime]:
    """Everything a conversation needs; the memory worker is built but its loop not started.

    `clock` and `sleep` are the time the agent, the memory work and storage keep (a bench
    runs a whole day on a simulated one)."""
    async with AsyncExitStack() as stack:
        core = await stack.enter_async_context(open_core(config, clock=clock))
        mate = config.mate
        warning = shared_owner_memory(mate)
        if warning:
            log.warning("%s", warning)
        offline = False
        window_config = mate.agent.conversation.window
        if llm is None:
            client = make_llm(config)
            offline = isinstance(client, OfflineClient)
            llm = await stack.enter_async_context(client)
            if not offline and mate.llm.base_url.strip():  # a local server may hold less than the window
                found = await probe_context(mate.llm.base_url, mate.llm.model)
                window_config = fitted_window(window_config, found, mate.llm.base_url)
        assert llm is not None
        if mate.llm.parses_text_tool_calls and not offline:
            llm = TextToolCallClient(llm)
        llm = UsageRecordingClient(llm, core.repos.llm_usage)
        leases = _leases(core, clock, sleep)
        tokens = TokenEstimator()
        outbox = ChannelOutbox()
        prefixes = ChatPrefixes()  # the agent's chat prefixes, which memory extraction reads from the cache
        # A model that holds little context gets the compact tool schemas (mate.llm.tools), and its
        # memory work is asked in smaller pieces.
        form = mate.llm.tool_form(window_config.default_max_input_tokens)
        services = _memory_services(stack, core, llm, clock, sleep, outbox, prefixes, leases,
                                    small_model=form == "compact") if with_memory_worker else None
        memory: MemoryEventSink = services.worker if services else NullMemorySink()
        window = ConversationWindowManager(
            window_config, core.repos, tokens, llm, core.prompts, memory,
            summary_model=mate.llm.effective_memory_model, time_label=MinuteLabels(mate.timezone),
        )
        consolidation_turns = ConsolidationTurns(core.repos)
        tool = WorkspaceMemoryTool(core.workspace, core.prompts, budgets={
            PROFILE_FILE: mate.memory.profile_max_chars, MEMORY_FILE: mate.memory.memory_max_chars},
            person_budget=mate.memory.person_max_chars, off_the_record=core.repos.incognito.holds,
            consolidation_run=consolidation_turns.run_of)
        semantic = await _semantic_search(stack, core, backfill=with_memory_worker)
        search = MemorySearchService(core.repos.search, semantic, clock=clock, timezone=mate.timezone)
        agent = Agent(mate, core.repos, core.workspace, window, llm, tokens, core.prompts,
                      [offered(tool, MEMORY_TOOL_LINES, form),
                       offered(MemorySearchTool(search, core.prompts), SEARCH_TOOL_LINES, form)],
                      clock=clock, prefixes=prefixes)
        media = MediaPreparer(mate.media, Path(mate.database.path).parent / "media",
                              voice=await _voice_notes(stack, mate.media))
        stack.callback(media.close)  # runs after the router drained: drops queued media work
        access = core.access
        channel_states = ChannelStateBoard()
        tasks = core.tasks
        searches = SearchFeature(search, core.prompts)
        # The commands take the router per call (ChatControl), so they are built first and
        # handed to it whole.
        commands = CommandHandler(mate, core.repos, core.memory_files, window, agent, core.prompts,
                                  emergence=services.emergence if services else None,
                                  summarizer=services.worker if services else None,
                                  channel_states=channel_states, search=searches, tasks=tasks,
                                  review=services.review if services else None)
        quiet = QuietFolds(window, prefixes, core.repos, model=agent.model,
                           quiet_minutes=window_config.quiet_fold_minutes(mate.llm.hosted_messages_api),
                           clock=clock, sleep=sleep)
        stack.push_async_callback(quiet.close)
        router = ChannelMessageRouter(mate, core.repos, core.agents, agent, memory, core.prompts,
                                      commands=commands, media=media, access=access, people=core.people,
                                      tasks=TurnTaskTools(tasks, core.prompts, core.repos.incognito.holds, form=form),
                                      clock=clock, leases=leases, quiet=quiet)
        yield Runtime(core=core, llm=llm, tokens=tokens, window=window, agent=agent, router=router,
                      commands=commands, memory=memory, offline=offline, channel_states=channel_states,
                      access=access, memory_tool=tool, search=searches, memory_services=services, tasks=tasks,
                      outbox=outbox, consolidation_turns=consolidation_turns, clock=clock, leases=leases)


def _leases(core: Core, clock: Clock, sleep: Sleep) -> Leases | None:
    """On a database several daemons may share (PostgreSQL), the leases they divide the work by;
    None on SQLite, which one daemon holds alone. A daemon is named by its host and data folder:
    restarted, it takes its own leases back at once."""
    if core.db.backend != "postgresql":
        return None
    holder = f"{socket.gethostname()}:{Path(core.config.mate.database.path).parent.resolve()}"
    return Leases(core.repos.leases, holder, clock=clock, sleep=sleep)


def _memory_services(
    stack: AsyncExitStack, core: Core, llm: LLMClient, clock: Clock, sleep: Sleep, outbox: ChannelOutbox,
    prefixes: ChatPrefixes, leases: Leases | None, *, small_model: bool = False,
) -> MemoryServices:
    mate = core.config.mate
    receipts = MemoryReceipts(mate.memory.receipts, core.repos, outbox, core.prompts)
    service = MemorySummarizationService(mate, core.repos, core.workspace, llm, core.prompts, clock, sleep=sleep,
                                         listener=receipts, prefixes=prefixes, small_model=small_model)
    worker = MemoryWorker(service, core.repos, mate, clock=clock, sleep=sleep, leases=leases)
    stack.push_async_callback(worker.close)
    # The owner's direct chat, where a proposal is sent: Telegram first (a private chat's id
    # is the user's, so the first admin's chat works before any is stored), then Discord.
    admins = mate.channels.telegram.admins
    owner_channels = (OwnerChannel("telegram", admins[0] if admins else None), OwnerChannel("discord"))
    review = ConsolidationReview(core.repos, core.workspace, core.prompts, outbox, core.history,
                                 owner_channels=owner_channels)
    emergence = MemoryEmergenceService(mate, core.repos, core.workspace, llm, core.prompts, clock, sleep=sleep,
                                       review=review)
    return MemoryServices(service, worker, emergence, review)


async def _voice_notes(stack: AsyncExitStack, media: MediaConfig) -> VoiceNoteReader:
    """Voice notes transcribed when an endpoint is configured; else they get the line saying how."""
    settings = media.transcription
    if settings is None:
        return VoiceNoteReader(None, max_minutes=media.max_audio_minutes)
    transcriber = await stack.enter_async_context(OpenAITranscriber(settings))
    return VoiceNoteReader(transcriber, max_minutes=media.max_audio_minutes, address=transcriber.address)


async def _semantic_search(
    stack: AsyncExitStack, core: Core, *, backfill: bool,
) -> SemanticSearch | None:
    """Semantic search when an embeddings endpoint is configured; the backfill runs beside the
    memory worker (the daemon), stopped before the database closes."""
    settings = core.config.mate.memory.embeddings
    if settings is None:
        return None
    client: EmbeddingClient
    batch = EMBEDDING_BATCH
    if isinstance(settings, str):  # builtin
        try:
            client = await stack.enter_async_context(BuiltinEmbedder())
        except BuiltinUnavailable as exc:
            log.warning("semantic search is off: %s; search finds by words alone", exc)
            return None
        address, batch = "builtin", BuiltinEmbedder.batch_size
    else:
        client = await stack.enter_async_context(OpenAIEmbeddingClient(settings))
        address = settings.base_url
    store = EmbeddingRepository(core.db)
    health = EndpointHealth(address)
    if backfill:
        await stack.enter_async_context(EmbeddingBackfill(client, store, health, batch_size=batch).running())
    return SemanticSearch(client, store, health)
