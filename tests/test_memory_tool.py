"""Tests of WorkspaceMemoryTool over a real SQLite workspace (SPEC S9)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.prompts import PromptLibrary
from bot.storage import Database, Repositories
from bot.storage.file_history import Change
from bot.storage.workspace_files import SqliteWorkspaceFileRepository
from bot.tools import ToolResult, ToolSet
from memory.tool import TOOL_NAMES, WorkspaceMemoryTool
from memory.workspace import WorkspaceFileService, WriteOutcome

AGENT = 1
OTHER_AGENT = 2
LIMIT = 256 * 1024


class InterferingWorkspace(WorkspaceFileService):
    """A real service where another writer changes the file just before each queued write.

    Each entry of `interference` maps the file's current content (None: no file) to
    what the other writer stores; it runs once, right before the tool's own write.
    """

    def __init__(self, files: SqliteWorkspaceFileRepository, seeds: PromptLibrary) -> None:
        super().__init__(files, seeds)
        self.interference: list[Callable[[str | None], str]] = []
        self.tool_writes = 0

    async def write(
        self, agent_id: int, filename: str, content: str, *, expected_version: int | None = None,
        enabled: bool = False, sort_order: int = 100, change: Change = "api", run_id: int | None = None,
    ) -> WriteOutcome:
        if self.interference:
            interfere = self.interference.pop(0)
            current = await self.get(agent_id, filename)
            await super().write(agent_id, filename, interfere(current.content if current else None))
        self.tool_writes += 1
        return await super().write(
            agent_id, filename, content, expected_version=expected_version,
            enabled=enabled, sort_order=sort_order, change=change, run_id=run_id,
        )


@dataclass
class Env:
    workspace: InterferingWorkspace
    tool: WorkspaceMemoryTool

    async def call(self, name: str, arguments: Any, agent_id: int = AGENT) -> tuple[dict[str, Any], bool]:
        result = await self.tool.call(agent_id, name, arguments)
        assert isinstance(result, ToolResult)
        return json.loads(result.content), result.is_error

    async def files(self, agent_id: int = AGENT) -> list[tuple[str, int, str, bool, int]]:
        return [
            (f.filename, f.version, f.content, f.enabled, f.sort_order)
            for f in await self.workspace.list(agent_id)
        ]


async def _env(tmp_path: Path, locale: str) -> AsyncIterator[Env]:
    prompts = PromptLibrary(locale)
    async with Database(tmp_path / "mate.db") as db:
        repos = Repositories.over(db)
        workspace = InterferingWorkspace(repos.workspace_files, prompts)
        for agent_id in (AGENT, OTHER_AGENT):
            await repos.agents.ensure(agent_id, f"agent-{agent_id}")
            await workspace.seed(agent_id)
        yield Env(workspace, WorkspaceMemoryTool(workspace, prompts))


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async for value in _env(tmp_path, "en"):
        yield value


@pytest.fixture
async def env_zh(tmp_path: Path) -> AsyncIterator[Env]:
    async for value in _env(tmp_path, "zh-CN"):
        yield value


# --- definitions -----------------------------------------------------------------


def test_tool_is_a_toolset_with_four_definitions(env: Env) -> None:
    tool: ToolSet = env.tool
    definitions = tool.definitions()
    assert [d["name"] for d in definitions] == list(TOOL_NAMES)
    required = {d["name"]: d["input_schema"]["required"] for d in definitions}
    assert required == {
        "list_workspace_memory_files": ["agentId"],
        "read_workspace_memory_file": ["agentId", "filename"],
        "write_workspace_memory_file": ["agentId", "filename", "content"],
        "edit_workspace_memory_file": ["agentId", "filename", "oldText", "newText"],
    }
    properties = {d["name"]: sorted(d["input_schema"]["properties"]) for d in definitions}
    assert properties["list_workspace_memory_files"] == ["agentId", "filenamePrefix"]
    assert properties["edit_workspace_memory_file"] == ["agentId", "filename", "newText", "oldText", "replaceAll"]
    for definition in definitions:
        assert definition["description"]
        assert definition["input_schema"]["type"] == "object"
    assert all(tool.handles(name) for name in TOOL_NAMES)
    assert not tool.handles("delete_workspace_memory_file")


def test_definitions_cannot_be_mutated_by_a_caller(env: Env) -> None:
    env.tool.definitions()[0]["name"] = "hijacked"
    assert env.tool.definitions()[0]["name"] == "list_workspace_memory_files"


# --- the four operations, exact JSON ----------------------------------------------


async def test_list_returns_files_in_sort_order_then_name(env: Env) -> None:
    await env.workspace.write(AGENT, "memory/2026-04-02.md", "b")
    await env.workspace.write(AGENT, "memory/2026-04-01.md", "aa")
    await env.workspace.write(AGENT, "early.md", "e", sort_order=1)
    output, is_error = await env.call("list_workspace_memory_files", {"agentId": AGENT})
    assert not is_error
    expected = [
        {"filename": f.filename, "enabled": f.enabled, "fileSize": f.file_size, "updateTime": f.update_time}
        for f in await env.workspace.list(AGENT)
    ]
    assert output == {"agentId": AGENT, "count": 7, "files": expected}
    assert [f["filename"] for f in output["files"]] == [
        "AGENTS.md", "SOUL.md", "early.md", "PROFILE.md", "MEMORY.md",
        "memory/2026-04-01.md", "memory/2026-04-02.md",
    ]


async def test_list_filters_by_prefix(env: Env) -> None:
    await env.workspace.write(AGENT, "memory/2026-04-01.md", "€uro")
    stored = await env.workspace.get(AGENT, "memory/2026-04-01.md")
    assert stored is not None
    output, is_error = await env.call(
        "list_workspace_memory_files", {"agentId": AGENT, "filenamePrefix": "memory/"}
    )
    assert not is_error
    assert output == {
        "agentId": AGENT,
        "count": 1,
        "files": [
            {"filename": "memory/2026-04-01.md", "enabled": False, "fileSize": 6,
             "updateTime": stored.update_time},
        ],
    }
    output, _ = await env.call("list_workspace_memory_files", {"agentId": AGENT, "filenamePrefix": None})
    assert output["count"] == 5


async def test_read_returns_the_exact_record(env: Env) -> None:
    stored = await env.workspace.get(AGENT, "MEMORY.md")
    assert stored is not None
    output, is_error = await env.call("read_workspace_memory_file", {"agentId": AGENT, "filename": "MEMORY.md"})
    assert not is_error
    assert output == {
        "agentId": AGENT,
        "filename": "MEMORY.md",
        "enabled": True,
        "fileSize": len(stored.content.encode("utf-8")),
        "content": stored.content,
        "updateTime": stored.update_time,
    }


async def test_write_creates_a_disabled_file(env: Env) -> None:
    content = "# 2026-04-01\n\n- 用户喜欢茶\n"
    output, is_error = await env.call(
        "write_workspace_memory_file",
        {"agentId": AGENT, "filename": "memory/2026-04-01.md", "content": content},
    )
    assert not is_error
    assert output == {
        "agentId": AGENT,
        "filename": "memory/2026-04-01.md",
        "created": True,
        "overwritten": False,
        "enabled": False,
        "bytesWritten": len(content.encode("utf-8")),
        "message": "Workspace memory file created",
    }
    stored = await env.workspace.get(AGENT, "memory/2026-04-01.md")
    assert stored is not None
    assert (stored.content, stored.enabled, stored.sort_order, stored.version) == (content, False, 100, 1)
    assert "用户喜欢茶" not in await env.workspace.build_system_prompt(AGENT)


async def test_write_overwrites_and_keeps_enabled(env: Env) -> None:
    output, is_error = await env.call(
        "write_workspace_memory_file", {"agentId": AGENT, "filename": "MEMORY.md", "content": "new memory"}
    )
    assert not is_error
    assert output == {
        "agentId": AGENT,
        "filename": "MEMORY.md",
        "created": False,
        "overwritten": True,
        "enabled": True,
        "bytesWritten": 10,
        "message": "Workspace memory file overwritten",
    }
    stored = await env.workspace.get(AGENT, "MEMORY.md")
    assert stored is not None
    assert (stored.content, stored.enabled, stored.sort_order, stored.version) == ("new memory", True, 3, 2)


async def test_write_stores_the_name_nfc_normalised(env: Env) -> None:
    output, is_error = await env.call(
        "write_workspace_memory_file", {"agentId": AGENT, "filename": "cafe\u0301.md", "content": "x"}
    )
    assert not is_error
    assert output["filename"] == "caf\u00e9.md"
    assert await env.workspace.get(AGENT, "caf\u00e9.md") is not None
    assert await env.workspace.get(AGENT, "cafe\u0301.md") is None


async def test_edit_replaces_one_occurrence(env: Env) -> None:
    await env.workspace.write(AGENT, "MEMORY.md", "likes 旧内容 and tea\n")
    output, is_error = await env.call(
        "edit_workspace_memory_file",
        {"agentId": AGENT, "filename": "MEMORY.md", "oldText": "旧内容", "newText": "新的内容", "replaceAll": False},
    )
    assert not is_error
    after = "likes 新的内容 and tea\n"
    assert output == {
        "agentId": AGENT,
        "filename": "MEMORY.md",
        "replacements": 1,
        "replaceAll": False,
        "fileSizeAfter": len(after.encode("utf-8")),
        "message": "Workspace memory file edited",
    }
    stored = await env.workspace.get(AGENT, "MEMORY.md")
    assert stored is not None
    assert stored.content == after
    assert stored.file_size == len(after.encode("utf-8"))


async def test_edit_replace_all_replaces_every_occurrence(env: Env) -> None:
    await env.workspace.write(AGENT, "notes.md", "tea, tea and tea")
    output, is_error = await env.call(
        "edit_workspace_memory_file",
        {"agentId": AGENT, "filename": "notes.md", "oldText": "tea", "newText": "coffee", "replaceAll": True},
    )
    assert not is_error
    assert (output["replacements"], output["replaceAll"], output["fileSizeAfter"]) == (3, True, 25)
    assert (await env.workspace.read_text(AGENT, "notes.md"))[0] == "coffee, coffee and coffee"


async def test_edit_with_replace_all_and_a_single_match_reports_one(env: Env) -> None:
    await env.workspace.write(AGENT, "notes.md", "tea once")
    output, is_error = await env.call(
        "edit_workspace_memory_file",
        {"agentId": AGENT, "filename": "notes.md", "oldText": "tea", "newText": "", "replaceAll": True},
    )
    assert not is_error
    assert (output["replacements"], output["replaceAll"]) == (1, True)
    assert (await env.workspace.read_text(AGENT, "notes.md"))[0] == " once"


async def test_edit_with_several_matches_and_no_replace_all_changes_nothing(env: Env) -> None:
    await env.workspace.write(AGENT, "notes.md", "tea, tea and tea")
    before = await env.files()
    for arguments in (
        {"agentId": AGENT, "filename": "notes.md", "oldText": "tea", "newText": "x", "replaceAll": False},
        {"agentId": AGENT, "filename": "notes.md", "oldText": "tea", "newText": "x"},
    ):
        output, is_error = await env.call("edit_workspace_memory_file", arguments)
        assert is_error
        assert output == {
            "error": "oldText occurs 3 times; nothing was changed. Add surrounding text to make it "
            "unique, or set replaceAll to true."
        }
    assert await env.files() == before


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (
            {"filename": "MEMORY.md", "oldText": "no such text", "newText": "x"},
            "oldText was not found in the file; nothing was changed. Read the file and copy the exact text.",
        ),
        ({"filename": "MEMORY.md", "oldText": "", "newText": "x"}, "oldText must not be empty"),
        ({"filename": "missing.md", "oldText": "a", "newText": "b"}, "File not found: missing.md"),
    ],
)
async def test_edit_errors_change_nothing(env: Env, arguments: dict[str, Any], error: str) -> None:
    before = await env.files()
    output, is_error = await env.call("edit_workspace_memory_file", {"agentId": AGENT, **arguments})
    assert is_error
    assert output == {"error": error}
    assert await env.files() == before


async def test_read_of_a_missing_file_is_an_error(env: Env) -> None:
    output, is_error = await env.call("read_workspace_memory_file", {"agentId": AGENT, "filename": "nope.md"})
    assert (output, is_error) == ({"error": "File not found: nope.md"}, True)


async def test_deleted_file_is_not_found(env: Env) -> None:
    await env.workspace.write(AGENT, "gone.md", "x")
    await env.workspace.delete(AGENT, "gone.md")
    output, is_error = await env.call("read_workspace_memory_file", {"agentId": AGENT, "filename": "gone.md"})
    assert (output, is_error) == ({"error": "File not found: gone.md"}, True)


# --- hostile names and bad input -------------------------------------------------

HOSTILE = [
    "../x.md", "/etc/x.md", "\\x.md", "a\\..\\b.md", "C:\\x.md", "C:x.md", "memory//x.md",
    "memory/../../MEMORY.md", "./MEMORY.md", "x.md/", " x.md", "x.md\x00", "\u202ex.md",
    "x\u200b.md", "．．/x.md", "a" * 300 + ".md", "", ".md",
]


def _hostile_calls(name: object) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("read_workspace_memory_file", {"agentId": AGENT, "filename": name}),
        ("write_workspace_memory_file", {"agentId": AGENT, "filename": name, "content": "pwned"}),
        ("edit_workspace_memory_file", {"agentId": AGENT, "filename": name, "oldText": "#", "newText": "pwned"}),
    ]


@pytest.mark.parametrize("name", HOSTILE, ids=repr)
async def test_hostile_name_is_refused_by_every_operation(env: Env, name: str) -> None:
    before = await env.files()
    for tool_name, arguments in _hostile_calls(name):
        output, is_error = await env.call(tool_name, arguments)
        assert is_error, tool_name
        assert output["error"].startswith("Invalid filename: "), (tool_name, output)
    assert await env.files() == before
    assert await env.files(OTHER_AGENT) == before


@pytest.mark.parametrize("name", ["x.txt", "x.MD", "x.md.txt", "x.MD.txt"])
async def test_wrong_extension_is_refused_by_every_operation(env: Env, name: str) -> None:
    before = await env.files()
    for tool_name, arguments in _hostile_calls(name):
        output, is_error = await env.call(tool_name, arguments)
        assert (output, is_error) == ({"error": "Only .md files are allowed"}, True)
    assert await env.files() == before


@pytest.mark.parametrize(
    ("tool_name", "arguments", "error"),
    [
        ("read_workspace_memory_file", None, "the input must be a JSON object"),
        ("read_workspace_memory_file", '{"filename": "MEMORY.md"}', "the input must be a JSON object"),
        ("write_workspace_memory_file", ["MEMORY.md", "x"], "the input must be a JSON object"),
        ("list_workspace_memory_files", 42, "the input must be a JSON object"),
        ("read_workspace_memory_file", {"agentId": AGENT}, "filename is required"),
        ("read_workspace_memory_file", {"filename": None}, "filename is required"),
        ("read_workspace_memory_file", {"filename": 7}, "filename must be a string"),
        ("read_workspace_memory_file", {"filename": ["MEMORY.md"]}, "filename must be a string"),
        ("write_workspace_memory_file", {"filename": "MEMORY.md"}, "content is required"),
        ("write_workspace_memory_file", {"filename": "MEMORY.md", "content": 5}, "content must be a string"),
        ("write_workspace_memory_file", {"filename": "MEMORY.md", "content": {"a": 1}}, "content must be a string"),
        ("write_workspace_memory_file", {"filename": "MEMORY.md", "content": "x\ud800"},
         "content is not valid Unicode text"),
        ("edit_workspace_memory_file", {"filename": "MEMORY.md", "oldText": "#"}, "newText is required"),
        ("edit_workspace_memory_file", {"filename": "MEMORY.md", "newText": "#"}, "oldText is required"),
        ("edit_workspace_memory_file", {"filename": "MEMORY.md", "oldText": "#", "newText": "x", "replaceAll": "true"},
         "replaceAll must be a boolean"),
        ("edit_workspace_memory_file", {"filename": "MEMORY.md", "oldText": "#", "newText": "x", "replaceAll": 1},
         "replaceAll must be a boolean"),
        ("list_workspace_memory_files", {"filenamePrefix": 3}, "filenamePrefix must be a string"),
    ],
)
async def test_bad_input_is_an_error_result(env: Env, tool_name: str, arguments: Any, error: str) -> None:
    before = await env.files()
    output, is_error = await env.call(tool_name, arguments)
    assert (output, is_error) == ({"error": f"Invalid tool input: {error}"}, True)
    assert await env.files() == before


async def test_unknown_tool_is_an_error_result(env: Env) -> None:
    output, is_error = await env.call("delete_workspace_memory_file", {"filename": "MEMORY.md"})
    assert (output, is_error) == ({"error": "Unknown tool: delete_workspace_memory_file"}, True)


# --- size limit ------------------------------------------------------------------


async def test_content_of_exactly_the_limit_is_accepted(env: Env) -> None:
    output, is_error = await env.call(
        "write_workspace_memory_file", {"agentId": AGENT, "filename": "big.md", "content": "a" * LIMIT}
    )
    assert not is_error
    assert output["bytesWritten"] == LIMIT


@pytest.mark.parametrize(
    "content",
    ["a" * (LIMIT + 1), "é" * (LIMIT // 2 + 1)],  # the second is under the limit in characters
    ids=["ascii", "two-byte"],
)
async def test_content_over_the_limit_in_utf8_bytes_is_refused(env: Env, content: str) -> None:
    before = await env.files()
    output, is_error = await env.call(
        "write_workspace_memory_file", {"agentId": AGENT, "filename": "MEMORY.md", "content": content}
    )
    size = len(content.encode("utf-8"))
    assert (output, is_error) == (
        {"error": f"Content is too large: {size} bytes (limit {LIMIT} bytes)"}, True
    )
    assert await env.files() == before


async def test_edit_that_would_exceed_the_limit_is_refused(env: Env) -> None:
    await env.workspace.write(AGENT, "notes.md", "x" * 10)
    before = await env.files()
    output, is_error = await env.call(
        "edit_workspace_memory_file",
        {"agentId": AGENT, "filename": "notes.md", "oldText": "x", "newText": "y" * LIMIT, "replaceAll": True},
    )
    assert is_error
    assert output["error"].startswith("Content is too large: ")
    assert await env.files() == before


async def test_limit_is_configurable(tmp_path: Path) -> None:
    async for env in _env(tmp_path, "en"):
        tool = WorkspaceMemoryTool(env.workspace, PromptLibrary("en"), max_content_bytes=4)
        result = await tool.call(AGENT, "write_workspace_memory_file", {"filename": "a.md", "content": "12345"})
        assert result.is_error
        assert json.loads(result.content) == {"error": "Content is too large: 5 bytes (limit 4 bytes)"}


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
async def test_profile_and_memory_budgets_hold_for_write_and_edit(tmp_path: Path, locale: str) -> None:
    async for env in _env(tmp_path, locale):
        tool = WorkspaceMemoryTool(env.workspace, PromptLibrary(locale), budgets={"PROFILE.md": 40, "MEMORY.md": 60})
        fact = "喜欢喝咖啡" if locale == "zh-CN" else "likes tea"
        await env.workspace.write(AGENT, "MEMORY.md", f"# Memory\n- {fact}")
        before = await env.files()
        over_write = await tool.call(AGENT, "write_workspace_memory_file",
                                     {"filename": "PROFILE.md", "content": fact * 9})
        over_edit = await tool.call(AGENT, "edit_workspace_memory_file",
                                    {"filename": "MEMORY.md", "oldText": fact, "newText": fact * 12})
        after = await env.files()
        within = await tool.call(AGENT, "write_workspace_memory_file", {"filename": "PROFILE.md", "content": fact})
        elsewhere = await tool.call(AGENT, "write_workspace_memory_file", {"filename": "notes.md", "content": fact * 99})
    assert over_write.is_error and over_edit.is_error
    assert f"{len(fact) * 9}" in json.loads(over_write.content)["error"]
    assert "40" in json.loads(over_write.content)["error"]
    assert f"{11 + len(fact) * 12}" in json.loads(over_edit.content)["error"]
    assert "60" in json.loads(over_edit.content)["error"]
    assert after == before  # nothing changed
    assert not within.is_error and not elsewhere.is_error


# --- the running agent, never the model's agentId -----------------------------------


async def test_read_with_another_agents_id_reads_only_the_running_agent(env: Env) -> None:
    await env.workspace.write(AGENT, "secret.md", "agent 1 only")
    output, is_error = await env.call(
        "read_workspace_memory_file", {"agentId": AGENT, "filename": "secret.md"}, agent_id=OTHER_AGENT
    )
    assert (output, is_error) == ({"error": "File not found: secret.md"}, True)


async def test_write_with_another_agents_id_lands_in_the_running_agent(env: Env) -> None:
    before = await env.files(AGENT)
    output, is_error = await env.call(
        "write_workspace_memory_file",
        {"agentId": AGENT, "filename": "MEMORY.md", "content": "written by 2"},
        agent_id=OTHER_AGENT,
    )
    assert not is_error
    assert output["agentId"] == OTHER_AGENT
    assert await env.files(AGENT) == before
    assert (await env.workspace.read_text(OTHER_AGENT, "MEMORY.md"))[0] == "written by 2"


@pytest.mark.parametrize("claimed", [AGENT, "1", None, -5, {"id": 1}])
async def test_output_agent_id_is_always_the_running_agent(env: Env, claimed: Any) -> None:
    for tool_name, arguments in (
        ("list_workspace_memory_files", {"agentId": claimed}),
        ("read_workspace_memory_file", {"agentId": claimed, "filename": "SOUL.md"}),
        ("write_workspace_memory_file", {"agentId": claimed, "filename": "n.md", "content": "#"}),
        ("edit_workspace_memory_file", {"agentId": claimed, "filename": "n.md", "oldText": "#", "newText": "#"}),
    ):
        output, is_error = await env.call(tool_name, arguments, agent_id=OTHER_AGENT)
        assert not is_error, output
        assert output["agentId"] == OTHER_AGENT
    assert await env.workspace.get(AGENT, "n.md") is None


async def test_list_shows_only_the_running_agents_files(env: Env) -> None:
    await env.workspace.write(AGENT, "memory/2026-04-01.md", "one")
    output, _ = await env.call(
        "list_workspace_memory_files", {"agentId": AGENT, "filenamePrefix": "memory/"}, agent_id=OTHER_AGENT
    )
    assert output == {"agentId": OTHER_AGENT, "count": 0, "files": []}


# --- concurrent writers --------------------------------------------------------------


async def test_edit_reapplies_on_a_concurrent_change_so_neither_is_lost(env: Env) -> None:
    await env.workspace.write(AGENT, "MEMORY.md", "- likes tea\n")
    env.workspace.interference.append(lambda text: f"{text}- lives in Paris\n")
    env.workspace.tool_writes = 0
    output, is_error = await env.call(
        "edit_workspace_memory_file",
        {"agentId": AGENT, "filename": "MEMORY.md", "oldText": "tea", "newText": "green tea"},
    )
    assert not is_error, output
    stored = await env.workspace.get(AGENT, "MEMORY.md")
    assert stored is not None
    assert stored.content == "- likes green tea\n- lives in Paris\n"
    assert output["fileSizeAfter"] == len(stored.content.encode("utf-8"))
    assert env.workspace.tool_writes == 2  # the stale write was refused, then retried


async def test_edit_retry_reports_when_the_concurrent_change_removed_the_text(env: Env) -> None:
    await env.workspace.write(AGENT, "MEMORY.md", "- likes tea\n")
    env.workspace.interference.append(lambda text: "- likes coffee\n")
    output, is_error = await env.call(
        "edit_workspace_memory_file",
        {"agentId": AGENT, "filename": "MEMORY.md", "oldText": "tea", "newText": "green tea"},
    )
    assert is_error
    assert output["error"].startswith("oldText was not found")
    assert (await env.workspace.read_text(AGENT, "MEMORY.md"))[0] == "- likes coffee\n"


async def test_write_racing_a_create_reports_an_overwrite(env: Env) -> None:
    env.workspace.interference.append(lambda text: "created by someone else")
    output, is_error = await env.call(
        "write_workspace_memory_file", {"agentId": AGENT, "filename": "race.md", "content": "mine"}
    )
    assert not is_error, output
    assert (output["created"], output["overwritten"]) == (False, True)
    stored = await env.workspace.get(AGENT, "race.md")
    assert stored is not None
    assert (stored.content, stored.version) == ("mine", 2)


async def test_two_conflicts_in_a_row_are_reported_and_the_other_writer_wins(env: Env) -> None:
    await env.workspace.write(AGENT, "MEMORY.md", "- likes tea\n")
    env.workspace.interference += [lambda text: f"{text}- one\n", lambda text: f"{text}- two\n"]
    output, is_error = await env.call(
        "edit_workspace_memory_file",
        {"agentId": AGENT, "filename": "MEMORY.md", "oldText": "tea", "newText": "green tea"},
    )
    assert is_error
    assert "MEMORY.md" in output["error"]
    assert (await env.workspace.read_text(AGENT, "MEMORY.md"))[0] == "- likes tea\n- one\n- two\n"


async def test_interleaved_edits_both_survive(env: Env) -> None:
    await env.workspace.write(AGENT, "notes.md", "alpha beta\n")
    first = env.call("edit_workspace_memory_file", {"filename": "notes.md", "oldText": "alpha", "newText": "A"})
    second = env.call("edit_workspace_memory_file", {"filename": "notes.md", "oldText": "beta", "newText": "B"})
    env.workspace.tool_writes = 0
    results = await asyncio.gather(first, second)
    assert [is_error for _, is_error in results] == [False, False]
    assert (await env.workspace.read_text(AGENT, "notes.md"))[0] == "A B\n"
    # Both read version 1 before either wrote, so one of them had to retry.
    assert env.workspace.tool_writes == 3


# --- zh-CN ------------------------------------------------------------------------


async def test_messages_follow_the_locale(env_zh: Env) -> None:
    output, _ = await env_zh.call(
        "write_workspace_memory_file",
        {"agentId": AGENT, "filename": "memory/2026-04-01.md", "content": "# 2026-04-01\n\n旧内容"},
    )
    assert output["message"] == "工作区记忆文件已创建"
    output, _ = await env_zh.call(
        "write_workspace_memory_file",
        {"agentId": AGENT, "filename": "memory/2026-04-01.md", "content": "# 2026-04-01\n\n旧内容"},
    )
    assert output["message"] == "工作区记忆文件已覆写"
    output, _ = await env_zh.call(
        "edit_workspace_memory_file",
        {"agentId": AGENT, "filename": "memory/2026-04-01.md", "oldText": "旧内容", "newText": "新内容"},
    )
    assert output["message"] == "工作区记忆文件编辑成功"
    output, is_error = await env_zh.call("read_workspace_memory_file", {"agentId": AGENT, "filename": "无.md"})
    assert (output, is_error) == ({"error": "文件不存在：无.md"}, True)
    output, is_error = await env_zh.call("read_workspace_memory_file", {"agentId": AGENT, "filename": "x.txt"})
    assert (output, is_error) == ({"error": "只允许 .md 文件"}, True)


async def test_json_output_keeps_non_ascii_text_readable(env_zh: Env) -> None:
    result = await env_zh.tool.call(
        AGENT, "write_workspace_memory_file", {"filename": "notes/项目.md", "content": "内容"}
    )
    assert "工作区记忆文件已创建" in result.content
    assert "notes/项目.md" in result.content
    assert "\\u" not in result.content
