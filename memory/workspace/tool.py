"""WorkspaceMemoryTool: the four workspace-memory tools offered to the model (SPEC S9)."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from bot.core.errors import VersionConflict, WorkspaceError
from bot.core.prompts import PromptLibrary
from bot.storage.file_versions import Change
from bot.core.records import WorkspaceFileRecord
from bot.core.tools import ToolResult
from memory.workspace.filenames import FilenameExtensionError, validate_workspace_filename
from memory.extraction.people_profiles import PEOPLE_FOLDER
from memory.workspace.service import WorkspaceFileService

log = logging.getLogger(__name__)

LIST_TOOL = "list_workspace_memory_files"
READ_TOOL = "read_workspace_memory_file"
WRITE_TOOL = "write_workspace_memory_file"
EDIT_TOOL = "edit_workspace_memory_file"
TOOL_NAMES: tuple[str, ...] = (LIST_TOOL, READ_TOOL, WRITE_TOOL, EDIT_TOOL)

DEFAULT_MAX_CONTENT_BYTES = 256 * 1024
# Files the model creates stay out of the system prompt until someone enables them (seed).
NEW_FILE_SORT_ORDER = 100
_CONFLICT_KEY = "tool_error_conflict"

_AGENT_ID = {"type": "integer", "description": "Your agent id (the running agent is always used)."}
_FILENAME = {
    "type": "string",
    "description": "Relative .md path, e.g. MEMORY.md or memory/2026-04-01.md.",
}

_DEFINITIONS: tuple[dict[str, Any], ...] = (
    {
        "name": LIST_TOOL,
        "description": (
            "List your workspace memory files (name, enabled, size in bytes, last update), "
            "ordered by sort order. Optionally only names starting with filenamePrefix, "
            "e.g. 'memory/' for the daily notes."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "agentId": _AGENT_ID,
                "filenamePrefix": {"type": "string", "description": "Only names starting with this."},
            },
            "required": ["agentId"],
        },
    },
    {
        "name": READ_TOOL,
        "description": "Read one workspace memory file: its full content, enabled flag, size and last update.",
        "input_schema": {
            "type": "object",
            "properties": {"agentId": _AGENT_ID, "filename": _FILENAME},
            "required": ["agentId", "filename"],
        },
    },
    {
        "name": WRITE_TOOL,
        "description": (
            "Create a workspace memory file or overwrite it completely with content. "
            "Read the file first: anything not in content is lost. New files start "
            "disabled (not injected into the system prompt)."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "agentId": _AGENT_ID,
                "filename": _FILENAME,
                "content": {"type": "string", "description": "The complete new content (markdown)."},
            },
            "required": ["agentId", "filename", "content"],
        },
    },
    {
        "name": EDIT_TOOL,
        "description": (
            "Edit a workspace memory file by exact find-and-replace: oldText must occur "
            "exactly once unless replaceAll is true. Prefer this over a full write for "
            "small changes."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "agentId": _AGENT_ID,
                "filename": _FILENAME,
                "oldText": {"type": "string", "description": "Exact text to find (not empty)."},
                "newText": {"type": "string", "description": "Replacement text (may be empty)."},
                "replaceAll": {
                    "type": "boolean",
                    "description": "Replace every occurrence instead of requiring exactly one.",
                    "default": False,
                },
            },
            "required": ["agentId", "filename", "oldText", "newText"],
        },
    },
)


# The compact form's one-liner per tool (mate.llm.tools: compact; bot.core.tools.compact_definitions).
SHORT_DESCRIPTIONS: dict[str, str] = {
    LIST_TOOL: "List your memory files.",
    READ_TOOL: "Read one memory file.",
    WRITE_TOOL: "Overwrite a memory file with its complete new content.",
    EDIT_TOOL: "Replace oldText with newText in a memory file.",
}


class _Refused(Exception):
    """Internal control flow: an operation was refused with a message localised for the model."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class WorkspaceMemoryTool:
    """Serves list/read/write/edit of the running agent's workspace files to the model."""

    def __init__(
        self,
        workspace: WorkspaceFileService,
        prompts: PromptLibrary,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        budgets: Mapping[str, int] | None = None, person_budget: int | None = None,
        off_the_record: Callable[[int], Awaitable[bool]] | None = None,
        consolidation_run: Callable[[int], Awaitable[int | None]] | None = None,
    ) -> None:
        self._workspace = workspace
        # The nightly review's consolidation run a turn belongs to, by the message that asked:
        # its writes are recorded as that consolidation, not as ordinary tool writes.
        self._consolidation_run = consolidation_run
        # Whether a user message was written in incognito: its turn reads memory, never writes it.
        self._off_the_record = off_the_record
        self._prompts = prompts
        self._max_content_bytes = max_content_bytes
        # filename -> the most characters it may hold (PROFILE.md, MEMORY.md): the same
        # budgets the memory extraction keeps, so the model cannot grow them past it.
        self._budgets = dict(budgets or {})
        self._person_budget = person_budget  # each people/*.md of a group's agent

    def definitions(self) -> list[dict[str, Any]]:
        # Deep copies: a caller that mutates a definition cannot change ours.
        return copy.deepcopy(list(_DEFINITIONS))

    def handles(self, name: str) -> bool:
        return name in TOOL_NAMES

    async def call(self, agent_id: int, name: str, arguments: Any, *, asked_in: int | None = None) -> ToolResult:
        """Run one tool for `agent_id`; the agentId inside `arguments` is never trusted."""
        try:
            if not self.handles(name):
                raise _Refused(self._prompts.text("tool_unknown", name=name))
            if not isinstance(arguments, dict):
                raise self._bad_input("the input must be a JSON object")
            if name == LIST_TOOL:
                payload = await self._list(agent_id, arguments)
            elif name == READ_TOOL:
                payload = await self._read(agent_id, arguments)
            elif (asked_in is not None and self._off_the_record is not None
                  and await self._off_the_record(asked_in)):
                raise _Refused(self._prompts.text("tool_error_incognito"))
            elif name == WRITE_TOOL:
                payload = await self._write(agent_id, arguments, *await self._attribution(asked_in))
            else:
                payload = await self._edit(agent_id, arguments, *await self._attribution(asked_in))
        except _Refused as refused:
            log.info("workspace tool %s refused for agent %s: %s", name, agent_id, refused.message)
            return ToolResult(_dump({"error": refused.message}), is_error=True)
        return ToolResult(_dump(payload))

    async def _list(self, agent_id: int, arguments: dict[str, Any]) -> dict[str, Any]:
        prefix = self._optional(arguments, "filenamePrefix", str, "")
        files = await self._workspace.list(agent_id, prefix)
        return {
            "agentId": agent_id,
            "count": len(files),
            "files": [
                {
                    "filename": f.filename,
                    "enabled": f.enabled,
                    "fileSize": f.file_size,
                    "updateTime": f.update_time,
                }
                for f in files
            ],
        }

    async def _read(self, agent_id: int, arguments: dict[str, Any]) -> dict[str, Any]:
        filename = self._filename(arguments)
        found = await self._existing(agent_id, filename)
        return {
            "agentId": agent_id,
            "filename": found.filename,
            "enabled": found.enabled,
            "fileSize": found.file_size,
            "content": found.content,
            "updateTime": found.update_time,
        }

    async def _attribution(self, asked_in: int | None) -> tuple[Change, int | None]:
        """The history entry of a write: the nightly consolidation's, or the tool's own."""
        if asked_in is not None and self._consolidation_run is not None:
            run_id = await self._consolidation_run(asked_in)
            if run_id is not None:
                return "emergence", run_id
        return "tool", None

    async def _write(self, agent_id: int, arguments: dict[str, Any], change: Change, run_id: int | None) -> dict[str, Any]:
        filename = self._filename(arguments)
        content = self._required(arguments, "content", str)
        size = self._checked_size(content, "content")
        self._check_budget(filename, content)
        for attempt in (1, 2):
            current = await self._workspace.get(agent_id, filename)
            try:
                outcome = await self._workspace.write(
                    agent_id, filename, content,
                    expected_version=current.version if current else 0,
                    enabled=False, sort_order=NEW_FILE_SORT_ORDER, change=change, run_id=run_id,
                )
                break
            except VersionConflict as conflict:
                # A whole-file write replaces whatever is there; retrying on the fresh
                # version keeps created/overwritten truthful instead of writing blind.
                self._conflict(agent_id, conflict, attempt)
        message_key = "tool_created" if outcome.created else "tool_overwritten"
        return {
            "agentId": agent_id,
            "filename": filename,
            "created": outcome.created,
            "overwritten": not outcome.created,
            "enabled": outcome.file.enabled,
            "bytesWritten": size,
            "message": self._prompts.text(message_key),
        }

    async def _edit(self, agent_id: int, arguments: dict[str, Any], change: Change, run_id: int | None) -> dict[str, Any]:
        filename = self._filename(arguments)
        old_text = self._required(arguments, "oldText", str)
        new_text = self._required(arguments, "newText", str)
        replace_all = self._optional(arguments, "replaceAll", bool, False)
        if not old_text:
            raise _Refused(self._prompts.text("tool_error_empty_old_text"))
        self._checked_size(new_text, "newText")
        for attempt in (1, 2):
            # On a retry the edit is applied afresh to the text the other writer left,
            # so their change survives alongside ours.
            current = await self._existing(agent_id, filename)
            count = current.content.count(old_text)
            if count == 0:
                raise _Refused(self._prompts.text("tool_error_old_text_not_found"))
            if count > 1 and not replace_all:
                raise _Refused(self._prompts.text("tool_error_ambiguous", count=count))
            edited = current.content.replace(old_text, new_text, -1 if replace_all else 1)
            size_after = self._checked_size(edited, "content")
            self._check_budget(filename, edited)
            try:
                await self._workspace.write(
                    agent_id, filename, edited, expected_version=current.version, change=change, run_id=run_id,
                )
                break
            except VersionConflict as conflict:
                self._conflict(agent_id, conflict, attempt)
        return {
            "agentId": agent_id,
            "filename": filename,
            "replacements": count,
            "replaceAll": replace_all,
            "fileSizeAfter": size_after,
            "message": self._prompts.text("tool_edited"),
        }

    async def _existing(self, agent_id: int, filename: str) -> WorkspaceFileRecord:
        found = await self._workspace.get(agent_id, filename)
        if found is None:
            raise _Refused(self._prompts.text("tool_error_not_found", filename=filename))
        return found

    def _conflict(self, agent_id: int, conflict: VersionConflict, attempt: int) -> None:
        """Allow one retry on fresh contents; a second conflict is reported to the model."""
        log.info("workspace tool: agent %s, %s (attempt %s)", agent_id, conflict, attempt)
        if attempt < 2:
            return
        if _CONFLICT_KEY in self._prompts.keys():
            raise _Refused(self._prompts.text(_CONFLICT_KEY, filename=conflict.filename))
        # Until strings.yaml carries the key in every locale, an English fallback.
        raise _Refused(f"{conflict.filename} changed while it was being written; read it again and retry")

    def _filename(self, arguments: dict[str, Any]) -> str:
        raw = self._required(arguments, "filename", str)
        try:
            return validate_workspace_filename(raw)
        except FilenameExtensionError:
            raise _Refused(self._prompts.text("tool_error_extension")) from None
        except WorkspaceError as error:
            raise _Refused(self._prompts.text("tool_error_name", reason=str(error))) from None

    def _checked_size(self, text: str, field: str) -> int:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            # A lone surrogate from a "\ud800" JSON escape cannot be stored as UTF-8.
            raise self._bad_input(f"{field} is not valid Unicode text") from None
        if size > self._max_content_bytes:
            raise _Refused(
                self._prompts.text("tool_error_too_large", size=size, limit=self._max_content_bytes)
            )
        return size

    def _check_budget(self, filename: str, text: str) -> None:
        budget = self._budgets.get(filename)
        if budget is None and filename.startswith(PEOPLE_FOLDER):  # a group member's profile
            budget = self._person_budget
        if budget is not None and len(text) > budget:
            raise _Refused(self._prompts.text("tool_error_over_budget", filename=filename, size=len(text),
                                              budget=budget))

    def _required(self, arguments: dict[str, Any], key: str, kind: type) -> Any:
        if key not in arguments or arguments[key] is None:
            raise self._bad_input(f"{key} is required")
        return self._typed(arguments[key], key, kind)

    def _optional(self, arguments: dict[str, Any], key: str, kind: type, default: Any) -> Any:
        # Models often send null for an optional field they mean to leave out.
        value = arguments.get(key)
        return default if value is None else self._typed(value, key, kind)

    def _typed(self, value: Any, key: str, kind: type) -> Any:
        # bool is a subclass of int, and an int is no string: check the exact JSON type.
        if type(value) is not kind:
            raise self._bad_input(f"{key} must be a {_JSON_TYPE_NAMES[kind]}")
        return value

    def _bad_input(self, error: str) -> _Refused:
        return _Refused(self._prompts.text("tool_bad_input", error=error))


_JSON_TYPE_NAMES: dict[type, str] = {str: "string", bool: "boolean"}


def _dump(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False)
