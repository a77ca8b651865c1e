"""Slash commands, the same on every channel (SPEC S11)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

from bot.conversation.agent import Agent
from bot.core.clock import iso, zone
from bot.conversation.commands.names import COMMANDS, command_name
from bot.conversation.commands.ports import MemoryFiles, MemorySearch
from bot.core.config import MateConfig
from bot.conversation.window import ConversationWindowManager
from bot.conversation.ports import ChatControl
from bot.core.prompts import PromptLibrary
from bot.storage import Repositories
from bot.storage.people import person_binding
from bot.core.records import ConversationRecord
from bot.conversation.reminder_port import ChatTasks, chat_of
from channels.base import ChannelStateBoard, InboundMessage
from memory.trust.history import Quotable, local_minute
from memory.workspace.service import MEMORY_FILE, PROFILE_FILE


log = logging.getLogger(__name__)

__all__ = ["COMMANDS", "CommandHandler"]


class EmergenceRunner(Protocol):
    async def emerge(self, agent_id: int) -> Any: ...


class SummarizeRunner(Protocol):
    async def summarize_now(self, agent_id: int, conversation_id: str) -> Any: ...

    async def conversation_ended(self, agent_id: int, conversation_id: str) -> None:
        """/new: extract what the closed conversation said without waiting for a pause."""
        ...


class ProposalReview(Protocol):
    """Reviewed consolidation: the owner's answer to a proposed MEMORY.md change."""

    async def approve(self, agent_id: int) -> str: ...

    async def reject(self, agent_id: int) -> str: ...


class CommandHandler:
    """Answers /help, /new, /compact, /status, /whoami, /tasks, /memory, /undo and /incognito; None for text
    that is not a command."""

    def __init__(
        self, config: MateConfig, repos: Repositories, memory_files: MemoryFiles,
        window: ConversationWindowManager, agent: Agent, prompts: PromptLibrary,
        emergence: EmergenceRunner | None = None, summarizer: SummarizeRunner | None = None,
        channel_states: ChannelStateBoard | None = None, search: MemorySearch | None = None,
        tasks: ChatTasks | None = None, review: ProposalReview | None = None,
    ) -> None:
        self._config = config
        self._memory_files = memory_files
        self._review = review
        self._tasks = tasks
        self._search = search
        self._repos = repos
        self._window = window
        self._agent = agent
        self._prompts = prompts
        self._emergence = emergence
        self._summarizer = summarizer
        self._channel_states = channel_states or ChannelStateBoard()

    async def handle(
        self, router: ChatControl, message: InboundMessage, conversation: ConversationRecord, text: str,
    ) -> str | None:
        command = command_name(text)
        if command is None:  # "/etc/hosts is empty, why?" is for the model
            return None
        words = text.split()
        args = [w.lower() for w in words[1:]]
        t = self._prompts.text
        if command == "start":
            return await self._start(router, message, conversation)
        if command == "help":
            return (t("help") + "\n" + t("help_tasks")
                    + ("\n" + t("help_console") if message.channel == "console" else ""))
        if command == "new":
            await self._repos.incognito.end(conversation.id)  # an incognito conversation's messages go
            await router.new_conversation(conversation, message)
            self._window.forget(conversation.id)
            if self._summarizer is not None:
                try:
                    await self._summarizer.conversation_ended(conversation.agent_id, conversation.id)
                except Exception:  # the pending row stays: it is extracted after the pause instead
                    log.warning("could not start the extraction of the closed conversation", exc_info=True)
            return t("new_conversation")
        if command == "undo":
            if not (message.is_direct or router.is_admin(message)):
                return t("undo_not_allowed")
            result = await self._memory_files.undo(conversation.agent_id, conversation.chat_key)
            return t(result.key, **result.values)
        if command == "incognito":
            if not (message.is_direct or router.is_admin(message)):  # one member does not decide for a group
                return t("incognito_not_allowed")
            return await self._incognito(conversation, args)
        if command == "compact":
            return await self._compact(conversation)
        if command == "status":
            return await self._status(conversation, await self._who(router, message, conversation))
        if command == "whoami":
            return await self._who(router, message, conversation)
        if command == "tasks":
            return await self._task_command(message, words[1:])
        return await self._memory(router, message, conversation, args, words[2:])

    async def _start(self, router: ChatControl, message: InboundMessage, conversation: ConversationRecord) -> str:
        """A greeting and the commands this person may use in this chat (Telegram sends /start
        when someone opens the bot): the admin commands only to an admin."""
        t = self._prompts.text
        admin = router.is_admin(message)
        agent = await self._repos.agents.get(conversation.agent_id)
        parts = [t("start_greeting", agent_name=agent.name if agent else "Mate"), t("start_everyone")]
        if self._tasks is not None and self._tasks.may_schedule(message):
            parts.append(t("start_tasks_cancel"))
        if message.is_direct or admin:  # one member does not decide for a group
            parts.append(t("start_own_chat"))
        if message.is_direct and (admin or await self._is_own_agent(router, message, conversation)):
            parts.append(t("start_own_memory"))
        if admin:
            parts.append(t("start_admin"))
            if message.is_direct:
                parts.append(t("start_admin_direct"))
        if message.channel == "console":
            parts.append(t("help_console").strip())
        return "\n".join(parts)

    async def _is_own_agent(self, router: ChatControl, message: InboundMessage,
                            conversation: ConversationRecord) -> bool:
        """Whether this direct chat is answered by the sender's own agent (the owner's agent 1, or
        the one made for this person): only then is its memory about them, not about others too."""
        if not message.is_direct:
            return False
        person = await router.person_of(message)
        own = 1 if person.is_owner else await self._repos.agents.agent_for_chat(person_binding(person.id))
        return own == conversation.agent_id

    async def _own_chats(self, router: ChatControl, message: InboundMessage) -> Quotable:
        """Whether a conversation is one of the sender's own chats: a direct chat that only their
        accounts wrote in (on any channel linked to them). Their own agent also hears others (the
        owner on the web page): what those said is not the person's to read."""
        person = await router.person_of(message)

        async def own(conversation_id: str) -> bool:
            chat = await self._repos.conversations.get(conversation_id)
            if chat is None or chat.is_group:
                return False
            senders = await self._repos.messages.recent_senders(conversation_id, 20)
            if not senders:
                return False
            for sender in senders:
                account = await self._repos.people.for_account(chat.channel, sender)
                if account is None or account.id != person.id:
                    return False
            return True

        return own

    async def _incognito(self, conversation: ConversationRecord, args: list[str]) -> str:
        t = self._prompts.text
        hours = _hours(self._config.memory.incognito_hours)
        if args[:1] == ["on"]:
            if await self._repos.incognito.start(conversation.id):
                return t("incognito_on", hours=hours)
            state = await self._repos.incognito.get(conversation.id)
            return t("incognito_already_on", since=self._when(state.start_time) if state else "?")
        if args[:1] == ["off"]:
            count = await self._repos.incognito.end(conversation.id)
            self._window.forget(conversation.id)
            if count is None:
                return t("incognito_already_off")
            return t("incognito_off_one") if count == 1 else t("incognito_off", count=count)
        return t("incognito_usage")

    async def _task_command(self, message: InboundMessage, args: list[str]) -> str:
        """/tasks lists this chat's tasks (anyone here may read them); /tasks cancel <id> needs the
        right to schedule in this chat."""
        t = self._prompts.text
        if self._tasks is None:
            return t("tasks_none")
        chat = chat_of(message)
        if not args:
            tasks = await self._tasks.in_chat(chat)
            if not tasks:
                return t("tasks_none")
            lines = [t("tasks_header")]
            for task in tasks:
                when = (self._tasks.next_run_text(task) or "?")[:16].replace("T", " ")
                key = "tasks_line_repeat" if task.cron else "tasks_line_once"
                lines.append(t(key, task_id=task.id, when=when, cron=task.cron, message=task.message))
            return "\n".join(lines)
        raw = args[1].lstrip("#") if len(args) == 2 else ""
        if args[0].lower() != "cancel" or not raw.isdecimal() or not raw.isascii() or len(raw) > 18:
            return t("tasks_usage")
        if not self._tasks.may_schedule(message):
            return t("task_not_allowed")
        task_id = int(raw)
        if not await self._tasks.cancel_in_chat(chat, task_id):
            return t("tasks_not_found", task_id=task_id)
        return t("tasks_cancelled", task_id=task_id)

    async def _compact(self, conversation: ConversationRecord) -> str:
        agent = await self._repos.agents.get(conversation.agent_id)
        system = await self._agent.system_prompt(conversation.agent_id, agent.name if agent else "Mate")
        result = await self._window.compact_now(conversation, system, self._agent.tool_definitions(),
                                                self._agent.model)
        if result is None:
            return self._prompts.text("compact_nothing")
        return self._prompts.text("compact_done", before=result.before_tokens, after=result.after_tokens)

    async def _who(self, router: ChatControl, message: InboundMessage, conversation: ConversationRecord) -> str:
        """One line: the person the bot takes the sender for, and the agent that answers here."""
        person = await router.person_of(message)
        agent = await self._repos.agents.get(conversation.agent_id)
        key = "whoami_owner" if person.is_owner else "whoami_person"
        return self._prompts.text(key, name=person.name, person_id=person.id, agent_id=conversation.agent_id,
                                  agent_name=agent.name if agent else "?")

    async def _status(self, conversation: ConversationRecord, who: str) -> str:
        t = self._prompts.text
        agent = await self._repos.agents.get(conversation.agent_id)
        name = agent.name if agent else "?"
        system = await self._agent.system_prompt(conversation.agent_id, name)
        fresh = await self._repos.conversations.get(conversation.id) or conversation
        used = await self._window.usage(fresh, system, self._agent.tool_definitions(), self._agent.model)
        budgets = {PROFILE_FILE: self._config.memory.profile_max_chars,
                   MEMORY_FILE: self._config.memory.memory_max_chars}
        lines = []
        for record in await self._memory_files.files(conversation.agent_id):
            if not record.enabled:
                continue
            size = len(record.content)
            if record.filename in budgets:
                lines.append(t("status_file_line", filename=record.filename, size=size,
                               budget=budgets[record.filename]))
            else:
                lines.append(t("status_file_line_unbudgeted", filename=record.filename, size=size))
        runs = [
            t("status_run_line", when=(r.finished or r.started)[:16].replace("T", " "), kind=r.kind,
              status=r.status, reason=(r.reason or r.error or "")[:120])
            for r in await self._repos.memory_runs.recent(conversation.agent_id, 5)
        ]
        channels = [t("status_channel_line", name=channel, state=state)
                    for channel, state in self._channel_states.states().items()]
        incognito = await self._repos.incognito.get(conversation.id)
        incognito_line = (t("status_incognito_on", since=self._when(incognito.start_time),
                            hours=_hours(self._config.memory.incognito_hours))
                          if incognito else t("status_incognito_off"))
        return t("status", who=who, agent_id=conversation.agent_id, agent_name=name, model=self._agent.model,
                 incognito=incognito_line,
                 provider=self._provider(),
                 window_tokens=used, window_budget=self._window.budget,
                 summary=t("status_summary_yes") if fresh.summary else t("status_summary_no"),
                 files="\n".join(lines), runs="\n".join(runs) or t("status_no_runs"),
                 channels="\n".join(channels) or t("status_no_channels"), tokens=await self._tokens_today())

    def _when(self, stored: str) -> str:
        return local_minute(stored, self._config.timezone)

    def _provider(self) -> str:
        llm = self._config.llm
        if not llm.uses_anthropic:
            return self._prompts.text("status_provider_offline")
        if llm.base_url.strip():  # only where it is: a URL may carry credentials in any part
            parts = urlsplit(llm.base_url.strip())
            try:
                port = f":{parts.port}" if parts.port else ""
            except ValueError:
                port = ""
            return self._prompts.text("status_provider_server", url=f"{parts.scheme}://{parts.hostname or '?'}{port}")
        if llm.protocol == "openai":
            return self._prompts.text("status_provider_openai")
        return self._prompts.text("status_provider_anthropic")

    async def _tokens_today(self) -> str:
        t = self._prompts.text
        midnight = datetime.now(zone(self._config.timezone)).replace(hour=0, minute=0, second=0, microsecond=0)
        totals = await self._repos.llm_usage.totals_since(iso(midnight))
        if not totals:
            return t("status_no_tokens")
        lines = [t("status_tokens_line", purpose=row.purpose, prompt=row.prompt_tokens, output=row.output_tokens,
                   calls=row.calls, cached=_percent(row.cache_read_input_tokens, row.prompt_tokens))
                 for row in totals]
        prompt = sum(row.prompt_tokens for row in totals)
        read = sum(row.cache_read_input_tokens for row in totals)
        lines.append(t("status_tokens_total", share=_percent(read, prompt), prompt=prompt))
        return "\n".join(lines)

    async def _memory(
        self, router: ChatControl, message: InboundMessage, conversation: ConversationRecord,
        args: list[str], rest: list[str],
    ) -> str:
        t = self._prompts.text
        action = args[0] if args else ""
        if action not in ("emerge", "summarize", "show", "search", "history", "why", "approve", "reject"):
            return t("memory_usage")
        if not router.is_admin(message):
            # Anyone may read what their own agent keeps about them, in their direct chat; the
            # rest of /memory changes things or reaches beyond it, and stays the admins'.
            if action not in ("show", "history", "why") or not message.is_direct:
                return t("not_admin")
            if not await self._is_own_agent(router, message, conversation):
                return t("memory_not_own")
        if action in ("history", "why") and not message.is_direct:  # they quote memory and what people said
            return t("direct_only")
        if action == "history":
            if len(rest) > 1:
                return t("history_usage")
            return await self._memory_files.history(conversation.agent_id, rest[0] if rest else None)
        if action == "why":
            quotable = None if router.is_admin(message) else await self._own_chats(router, message)
            return await self._memory_files.why(conversation.agent_id, " ".join(rest), quotable)
        if action in ("approve", "reject"):
            # "/memory approve 3": another agent's proposal, sent to the owner's chat with its id.
            if len(rest) > 1 or (rest and not (rest[0].isdigit() and 0 < len(rest[0]) <= 9)):
                return t("memory_usage")
            agent_id = int(rest[0]) if rest else conversation.agent_id
            if self._review is None:
                return t("proposal_none")
            if action == "approve":
                return await self._review.approve(agent_id)
            return await self._review.reject(agent_id)
        if action == "show":
            return await self._show(message, conversation, args[1] if len(args) > 1 else "memory")
        if action == "search":
            return await self._search_text(message, conversation, " ".join(args[1:]))
        if action == "emerge":
            if self._emergence is None:
                return t("emerge_disabled")
            try:
                outcome = await self._emergence.emerge(conversation.agent_id)
            except Exception as exc:  # reported to the admin, never raised through the router
                log.exception("emergence command failed")
                return t("emerge_failed", error=type(exc).__name__)
            return emergence_text(self._prompts, outcome)
        if self._summarizer is None:
            return t("summarize_failed", error="memory extraction is not running")
        try:
            outcome = await self._summarizer.summarize_now(conversation.agent_id, conversation.id)
        except Exception as exc:
            log.exception("summarize command failed")
            return t("summarize_failed", error=type(exc).__name__)
        if getattr(outcome, "status", "") == "failed":
            return t("summarize_failed", error=getattr(outcome, "reason", ""))
        return t("summarize_done", status=getattr(outcome, "status", "?"), reason=getattr(outcome, "reason", ""))

    async def _show(self, message: InboundMessage, conversation: ConversationRecord, which: str) -> str:
        if not message.is_direct:
            return self._prompts.text("direct_only")
        shown = await self._memory_files.show(conversation.agent_id, which)
        if shown is None:
            return self._prompts.text("memory_usage")
        return shown.content.strip() or self._prompts.text("show_empty", filename=shown.filename)

    async def _search_text(self, message: InboundMessage, conversation: ConversationRecord, query: str) -> str:
        if not message.is_direct:
            return self._prompts.text("direct_only")
        if self._search is None:
            return self._prompts.text("search_usage")
        return await self._search.text(conversation.agent_id, query)


def emergence_text(prompts: PromptLibrary, outcome: Any) -> str:
    status = getattr(outcome, "status", "")
    reason = getattr(outcome, "reason", "") or ""
    if status == "disabled":
        return prompts.text("emerge_disabled")
    if status == "skipped":
        return prompts.text("emerge_skipped", reason=reason)
    if status == "failed":
        return prompts.text("emerge_failed", error=reason)
    if status == "proposed":
        return prompts.text("proposal_made")
    key = "emerge_updated" if getattr(outcome, "updated", False) else "emerge_not_updated"
    return prompts.text(key, reason=reason)


def _hours(hours: float) -> str:
    return f"{hours:g}"


def _percent(part: int, whole: int) -> int:
    return round(100 * part / whole) if whole else 0
