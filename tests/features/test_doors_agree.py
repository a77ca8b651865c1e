"""Tasks and people have one service each below the doors (TaskService, PersonDirectory): the
API, the CLI and the chat command list the same rows for the same data."""

from __future__ import annotations

import argparse
from pathlib import Path

import aiohttp
import pytest

from bot.app.api.server import ApiServer
from bot.app.cli import lists
from bot.app.runtime import open_runtime
from bot.schedule.reminders.service import Sender
from bot.storage.tasks import ChatRef
from channels.base import InboundMessage
from tests.support.config import make_config, pinned_clock


async def test_the_api_the_cli_and_tasks_list_the_same_tasks(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    config = make_config(tmp_path, llm={"provider": "offline"}, api={"port": 0, "token": ""})
    async with open_runtime(config, with_memory_worker=False, clock=pinned_clock()) as rt, \
            ApiServer(rt, config.mate.api) as server, aiohttp.ClientSession() as http:
        here = await rt.tasks.schedule(ChatRef("console", "me"), Sender("me", "me"), 1, "call mum",
                                       at="2030-01-01T09:00:00")
        there = await rt.tasks.schedule(ChatRef("telegram", "7"), Sender("7", "Ana"), 1, "stand-up",
                                        cron="0 10 * * 1-5")
        base = f"http://127.0.0.1:{server.port}/api/v1/agents/1/tasks"
        async with http.get(base) as response:
            api_ids = [task["taskId"] for task in (await response.json())["data"]["tasks"]]
        chat = await rt.router.handle(InboundMessage("console", "me", "me", "me", "/tasks", is_admin=True))
        capsys.readouterr()
        assert await lists.tasks(config, argparse.Namespace(agent=1)) == 0
        cli_ids = [int(line.split("\t")[0]) for line in capsys.readouterr().out.splitlines()]

        async with http.delete(f"{base}/{there.id}") as response:
            assert response.status == 200
        assert await lists.tasks(config, argparse.Namespace(agent=1)) == 0
        after = [int(line.split("\t")[0]) for line in capsys.readouterr().out.splitlines()]

    assert api_ids == cli_ids == [there.id, here.id]  # the next due first: the stand-up, then 2030
    assert chat is not None and f"#{here.id}" in chat.text and "call mum" in chat.text  # this chat's only
    assert f"#{there.id}" not in chat.text and "stand-up" not in chat.text
    assert after == [here.id]


async def test_the_api_and_the_cli_list_the_same_people(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = make_config(tmp_path, llm={"provider": "offline"}, api={"port": 0, "token": ""},
                         people=[{"name": "Kim", "ids": ["discord:42", "telegram:43"]}])
    async with open_runtime(config, with_memory_worker=False) as rt, \
            ApiServer(rt, config.mate.api) as server, aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{server.port}/api/v1/people") as response:
            api_people = [(p["personId"], p["name"], p["owner"], " ".join(p["accounts"]) or "-")
                          for p in (await response.json())["data"]["people"]]
        capsys.readouterr()
        assert await lists.people(config, argparse.Namespace()) == 0
        rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]

    cli_people = [(int(row[0]), row[1], row[2] == "owner", row[4]) for row in rows]
    assert api_people == cli_people
    assert ("Kim", "discord:42 telegram:43") in [(name, accounts) for _, name, _, accounts in cli_people]
