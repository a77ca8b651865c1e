"""The four memory tools through full agent turns: the fake model calls, the fake sees the result."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.llm import AnthropicClient
from bot.app.runtime import Runtime, open_runtime
from channels.base import InboundMessage
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[tuple[Runtime, FakeAnthropic]]:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0})
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm,
                                                                         with_memory_worker=False) as rt:
            yield rt, fake


async def _turn(rt: Runtime, fake: FakeAnthropic, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One user message; the model calls `tool`, then answers. Returns the tool_result block."""
    fake.reply_tool_use(tool, arguments, tool_use_id="toolu_1")
    fake.reply_text("done")
    reply = await rt.router.handle(InboundMessage("console", "me", "me", "Me", "please use your memory"))
    assert reply is not None and reply.text == "done"
    follow_up = fake.messages_requests()[-1]["messages"][-1]
    (result,) = [b for b in follow_up["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == "toolu_1"
    return result


async def test_write_then_list_read_edit_exact_json(env: tuple[Runtime, FakeAnthropic]) -> None:
    rt, fake = env
    # The model claims agent 7: the running agent (1) is used all the same.
    written = await _turn(rt, fake, "write_workspace_memory_file",
                          {"agentId": 7, "filename": "memory/2026-04-01.md", "content": "# 2026-04-01\n\n- 咖啡"})
    assert "is_error" not in written
    assert json.loads(written["content"]) == {
        "agentId": 1, "filename": "memory/2026-04-01.md", "created": True, "overwritten": False,
        "enabled": False, "bytesWritten": len("# 2026-04-01\n\n- 咖啡".encode()),
        "message": "Workspace memory file created",
    }

    listed = json.loads((await _turn(rt, fake, "list_workspace_memory_files",
                                     {"agentId": 1, "filenamePrefix": "memory/"}))["content"])
    record = await rt.core.workspace.get(1, "memory/2026-04-01.md")
    assert listed == {"agentId": 1, "count": 1, "files": [
        {"filename": "memory/2026-04-01.md", "enabled": False, "fileSize": record.file_size,
         "updateTime": record.update_time}]}

    read = json.loads((await _turn(rt, fake, "read_workspace_memory_file",
                                   {"agentId": 1, "filename": "memory/2026-04-01.md"}))["content"])
    assert read == {"agentId": 1, "filename": "memory/2026-04-01.md", "enabled": False,
                    "fileSize": record.file_size, "content": "# 2026-04-01\n\n- 咖啡",
                    "updateTime": record.update_time}

    edited = json.loads((await _turn(rt, fake, "edit_workspace_memory_file",
                                     {"agentId": 1, "filename": "memory/2026-04-01.md", "oldText": "咖啡",
                                      "newText": "green tea", "replaceAll": False}))["content"])
    after = await rt.core.workspace.get(1, "memory/2026-04-01.md")
    assert after.content == "# 2026-04-01\n\n- green tea"
    assert edited == {"agentId": 1, "filename": "memory/2026-04-01.md", "replacements": 1, "replaceAll": False,
                      "fileSizeAfter": after.file_size, "message": "Workspace memory file edited"}
    assert await rt.core.workspace.list(7) == []


async def test_tool_error_reaches_the_model_and_changes_nothing(env: tuple[Runtime, FakeAnthropic]) -> None:
    rt, fake = env
    before = [(f.filename, f.version) for f in await rt.core.workspace.list(1)]
    result = await _turn(rt, fake, "write_workspace_memory_file",
                         {"agentId": 1, "filename": "../escape.md", "content": "x"})
    assert result["is_error"] is True
    assert "error" in json.loads(result["content"])
    missing = await _turn(rt, fake, "edit_workspace_memory_file",
                          {"agentId": 1, "filename": "MEMORY.md", "oldText": "not in the file", "newText": "y"})
    assert missing["is_error"] is True
    assert [(f.filename, f.version) for f in await rt.core.workspace.list(1)] == before
