"""MemoryHistoryService: a memory file's versions, /undo of a chat's last run, and /memory why (SPEC S29)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.core.clock import parse_iso, zone
from bot.core.errors import VersionConflict
from bot.core.prompts import PromptLibrary
from bot.storage import Repositories
from bot.storage.file_history import FileVersion
from memory.workspace.service import WorkspaceFileService

log = logging.getLogger(__name__)

HISTORY_LINES = 10
WHY_MESSAGES = 3
WHY_MESSAGE_CHARS = 120

# Whether a conversation's words may be quoted to the person asking (given its id).
Quotable = Callable[[str], Awaitable[bool]]


def local_minute(stored: str, timezone: str) -> str:
    """A stored UTC time as local "YYYY-MM-DD HH:MM" (the stored text cut short if it is no time)."""
    try:
        return parse_iso(stored).astimezone(zone(timezone)).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return stored[:16].replace("T", " ")


def shortened(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass(frozen=True, slots=True)
class UndoResult:
    """What /undo did: `key` names the answer's text, `values` fill it."""

    key: str
    values: dict[str, str]


class MemoryHistoryService:
    def __init__(self, repos: Repositories, workspace: WorkspaceFileService, prompts: PromptLibrary,
                 timezone: str) -> None:
        self._repos = repos
        self._workspace = workspace
        self._prompts = prompts
        self._timezone = timezone

    def when(self, stored: str) -> str:
        """A stored UTC time as local "YYYY-MM-DD HH:MM"."""
        return local_minute(stored, self._timezone)

    async def source(self, version: FileVersion) -> str:
        """Where a version came from, in words (the chat it was kept from, for an extraction)."""
        t = self._prompts.text
        if version.change == "extraction":
            run = await self._repos.memory_runs.get(version.run_id) if version.run_id is not None else None
            if run is None or not run.conversation_id:
                return t("history_source_extraction_unknown")
            return t("history_source_extraction", conversation=run.conversation_id)
        return t(f"history_source_{version.change}")

    async def lines(self, agent_id: int, filename: str | None = None) -> str:
        """/memory history [file]: the latest changes, the newest first, with their source."""
        t = self._prompts.text
        versions = await self._repos.file_history.recent(agent_id, HISTORY_LINES, filename)
        if not versions:
            return t("history_none_file", filename=filename) if filename else t("history_none")
        lines = [t("history_header")]
        for version in versions:
            lines.append(t("history_line", when=self.when(version.create_time), filename=version.filename,
                           version=version.version, source=await self.source(version)))
        return "\n".join(lines)

    async def undo(self, agent_id: int, chat_key: str) -> UndoResult:
        """Every file the chat's last extraction run changed back to the version before it, in one
        transaction, unless one of them changed since (then nothing changes and it is named)."""
        history = self._repos.file_history
        run_id = await history.last_chat_run(chat_key, agent_id)
        if run_id is None:
            return UndoResult("undo_nothing", {})
        if await history.was_undone(run_id):
            return UndoResult("undo_already", {})
        changes = await history.run_changes(run_id)
        run = await self._repos.memory_runs.get(run_id)
        when = self.when(run.finished or run.started) if run else "?"
        for change in changes:
            if change.previous is None and change.made_version > 1:
                return UndoResult("undo_not_kept", {"filename": change.filename})
            if change.current_version != change.made_version:
                latest = await self._repos.workspace_files.get(agent_id, change.filename)
                return UndoResult("undo_conflict", {"filename": change.filename,
                                                    "when": self.when(latest.update_time) if latest else "?"})
        try:
            await history.undo(run_id, changes, self._workspace.history_versions)
        except VersionConflict as conflict:  # changed between the check and the transaction
            return UndoResult("undo_conflict", {"filename": conflict.filename, "when": "?"})
        finally:
            self._workspace.invalidate(agent_id)
        log.info("undid memory run %s: %s", run_id, ", ".join(c.filename for c in changes))
        return UndoResult("undo_done", {"filenames": ", ".join(c.filename for c in changes), "when": when})

    async def why(self, agent_id: int, text: str, quotable: Quotable | None = None) -> str:
        """/memory why <text>: the oldest kept version holding the text, and the run that wrote it.

        The run's user messages are quoted when `quotable` (None: always) says its conversation may
        be quoted to the asker; otherwise the file, time and source alone."""
        t = self._prompts.text
        needle = " ".join(text.split())
        if not needle:
            return t("why_usage")
        found = await self._repos.file_history.oldest_containing(agent_id, needle)
        if found is None:
            return t("why_none", text=shortened(needle, 80))
        history = self._repos.file_history
        if found.version > 1 and not await history.has_version(found.file_id, found.version - 1):
            # The versions before it were pruned: the text may be older than the history kept.
            return t("why_before_history", text=shortened(needle, 80), filename=found.filename,
                     when=self.when(found.create_time))
        lines = [t("why_found", text=shortened(needle, 80), filename=found.filename,
                   when=self.when(found.create_time), source=await self.source(found))]
        if found.change == "extraction" and found.run_id is not None:
            if quotable is not None:
                run = await self._repos.memory_runs.get(found.run_id)
                if run is None or not run.conversation_id or not await quotable(run.conversation_id):
                    return "\n".join(lines)
            said = await self._repos.memory_runs.user_messages(found.run_id, WHY_MESSAGES)
            if said:
                lines.append(t("why_messages"))
                lines += [t("why_message_line", text=shortened(message, WHY_MESSAGE_CHARS)) for message in said]
            else:
                lines.append(t("why_no_messages"))
        return "\n".join(lines)
