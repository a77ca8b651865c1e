"""What WorkspaceMemoryTool refuses and protects (SPEC S9): hostile names and bad input, the size
limit and the file budgets, other agents' files, and a change by a concurrent writer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bot.core.prompts import PromptLibrary
from memory.workspace.tool import WorkspaceMemoryTool
from tests.support.memory_tool_env import AGENT, LIMIT, OTHER_AGENT, Env, env, workspace_env  # noqa: F401  (fixture)

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
    async for opened in workspace_env(tmp_path, "en"):
        tool = WorkspaceMemoryTool(opened.workspace, PromptLibrary("en"), max_content_bytes=4)
        result = await tool.call(AGENT, "write_workspace_memory_file", {"filename": "a.md", "content": "12345"})
        assert result.is_error
        assert json.loads(result.content) == {"error": "Content is too large: 5 bytes (limit 4 bytes)"}


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
async def test_profile_and_memory_budgets_hold_for_write_and_edit(tmp_path: Path, locale: str) -> None:
    async for opened in workspace_env(tmp_path, locale):
        tool = WorkspaceMemoryTool(opened.workspace, PromptLibrary(locale), budgets={"PROFILE.md": 40, "MEMORY.md": 60})
        fact = "喜欢喝咖啡" if locale == "zh-CN" else "likes tea"
        await opened.workspace.write(AGENT, "MEMORY.md", f"# Memory\n- {fact}")
        before = await opened.files()
        over_write = await tool.call(AGENT, "write_workspace_memory_file",
                                     {"filename": "PROFILE.md", "content": fact * 9})
        over_edit = await tool.call(AGENT, "edit_workspace_memory_file",
                                    {"filename": "MEMORY.md", "oldText": fact, "newText": fact * 12})
        after = await opened.files()
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
