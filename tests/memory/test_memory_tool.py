"""WorkspaceMemoryTool's four operations over a real SQLite workspace: its definitions, the exact JSON
each answers, its errors and its locale (SPEC S9; what it refuses: test_memory_tool_guards.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bot.core.tools import ToolSet
from memory.workspace.tool import TOOL_NAMES
from tests.support.memory_tool_env import AGENT, Env, env, env_zh  # noqa: F401  (fixtures)

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
