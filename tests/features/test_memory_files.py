"""The memory files feature over a real database: listed, read, shown by their chat names, their
versions, history, why and undo; and the chat command, the API and the CLI showing the same files."""

from __future__ import annotations

import argparse
from pathlib import Path

import aiohttp
import pytest

from bot.app.api.server import ApiServer
from bot.app.cli.memory import memory_show
from bot.app.core import Core
from bot.app.runtime import open_runtime
from bot.conversation.commands.ports import ShownFile
from bot.core.clock import local_date
from bot.storage.memory_commit import ExtractionCommit, FileWrite
from channels.base import InboundMessage
from memory.trust.history import UndoResult
from memory.workspace.service import daily_note_name
from tests.support.config import make_config

CHAT_KEY = "telegram:7"


async def test_files_are_listed_read_and_shown_by_their_chat_names(core: Core) -> None:
    files = core.memory_files
    await core.workspace.write(1, "MEMORY.md", "- the spare key is under the blue pot\n")

    assert [f.filename for f in await files.files(1)] == ["AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"]
    assert [f.filename for f in await files.files(1, "MEM")] == ["MEMORY.md"]
    read = await files.read(1, "MEMORY.md")
    assert read is not None and read.content == "- the spare key is under the blue pot\n"
    assert await files.read(1, "NOTES.md") is None
    assert await files.show(1, "memory") == ShownFile("MEMORY.md", "- the spare key is under the blue pot\n")
    today = await files.show(1, "today")
    assert today == ShownFile(daily_note_name(local_date("UTC")), "")  # no note yet: empty, not refused
    assert await files.show(1, "MEMORY.md") is None  # chat names only


async def test_versions_are_the_newest_first_and_none_for_a_missing_file(core: Core) -> None:
    await core.workspace.write(1, "NOTES.md", "one")
    await core.workspace.write(1, "NOTES.md", "two")

    found = await core.memory_files.versions(1, "NOTES.md")

    assert found is not None and found.file.version == 2
    assert [(v.version, v.content, v.change) for v in found.versions] == [(2, "two", "api"), (1, "one", "api")]
    assert await core.memory_files.versions(1, "MISSING.md") is None
    assert await core.memory_files.versions(2, "NOTES.md") is None  # agent 2 has no such file


async def _extraction(core: Core, content: str) -> int:
    """PROFILE.md as one extraction run of the chat CHAT_KEY wrote it."""
    conversation = await core.repos.conversations.create(f"{CHAT_KEY}#1", agent_id=1, channel="telegram",
                                                         chat_key=CHAT_KEY, trigger_source="channel")
    run_id = await core.repos.memory_runs.start(1, "summarize", conversation.id)
    _, version = await core.workspace.read_text(1, "PROFILE.md")
    await core.repos.memory_commits.commit(ExtractionCommit(
        1, conversation.id, [FileWrite("PROFILE.md", content, version)], 0, run_id, "updated", "moved"))
    core.workspace.invalidate(1)
    return run_id


async def test_history_why_and_undo_answer_for_one_extraction(core: Core) -> None:
    t = core.prompts.text
    files = core.memory_files
    before, _ = await core.workspace.read_text(1, "PROFILE.md")
    assert await files.undo(1, CHAT_KEY) == UndoResult("undo_nothing", {})
    await _extraction(core, before + "- Lives in Lisbon\n")

    history = await files.history(1, "PROFILE.md")
    assert history.splitlines()[0] == t("history_header") and "PROFILE.md v2" in history
    assert await files.history(1, "NOTES.md") == t("history_none_file", filename="NOTES.md")
    why = (await files.why(1, "lisbon")).splitlines()
    assert "PROFILE.md" in why[0] and why[1:] == [t("why_no_messages")]  # the run quoted no message
    assert await files.why(1, " ") == t("why_usage")

    undone = await files.undo(1, CHAT_KEY)
    assert undone.key == "undo_done" and undone.values["filenames"] == "PROFILE.md"
    assert (await core.workspace.read_text(1, "PROFILE.md"))[0] == before
    assert await files.undo(1, CHAT_KEY) == UndoResult("undo_already", {})


async def test_chat_api_and_cli_show_the_same_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = make_config(tmp_path, llm={"provider": "offline"}, api={"port": 0, "token": ""})
    async with open_runtime(config, with_memory_worker=False) as rt, \
            ApiServer(rt, config.mate.api) as server, aiohttp.ClientSession() as http:
        await rt.core.workspace.write(1, "MEMORY.md", "- the spare key is under the blue pot\n")
        base = f"http://127.0.0.1:{server.port}/api/v1/memory/1/files"
        async with http.get(base) as response:
            api_names = [f["filename"] for f in (await response.json())["data"]["files"]]
        async with http.get(f"{base}/MEMORY.md") as response:
            api_content = (await response.json())["data"]["content"]
        reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", "/memory show memory",
                                                      is_admin=True))

        capsys.readouterr()
        assert await memory_show(config, argparse.Namespace(agent=1, filename=None)) == 0
        cli_names = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
        assert await memory_show(config, argparse.Namespace(agent=1, filename="MEMORY.md")) == 0
        cli_content = capsys.readouterr().out

    assert api_names == cli_names == ["AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"]
    assert api_content == cli_content.removesuffix("\n") == "- the spare key is under the blue pot\n"
    assert reply is not None and reply.text == api_content.strip()

