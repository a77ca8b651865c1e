"""Reminders for the owner: the API routes, `matebot tasks`, and the migration that made room for them
in mate_cron_job (SPEC S27)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.__main__ import main
from bot.app.api.server import ApiServer
from bot.app.runtime import Runtime, open_runtime
from bot.storage import Database, Repositories
from bot.storage.migrations import LATEST_VERSION, MIGRATIONS
from bot.storage.search_text import FUNCTION_NAME as SPACED_FUNCTION, spaced
from bot.storage.tasks import ChatRef
from bot.schedule.reminders.service import Sender
from tests.support.config import make_config

TOKEN = "api-token-tasks"
ANA = ChatRef("telegram", "7")
GROUP = ChatRef("telegram", "-1001", "5")


def soon(hours: int) -> str:
    return (datetime.now(timezone.utc) + timedelta(hours=hours)).replace(tzinfo=None).isoformat(timespec="seconds")


@asynccontextmanager
async def api(tmp_path: Path) -> AsyncIterator[tuple[Runtime, aiohttp.ClientSession, str]]:
    config = make_config(tmp_path, agents=[{"id": 1, "name": "Mate"}, {"id": 2, "name": "Other"}],
                         api={"port": 0, "token": TOKEN})
    async with open_runtime(config, with_memory_worker=False) as rt, ApiServer(rt, config.mate.api, TOKEN) as server, \
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        yield rt, http, f"http://127.0.0.1:{server.port}"


async def call(http: aiohttp.ClientSession, method: str, url: str) -> tuple[int, Any]:
    async with http.request(method, url) as response:
        return response.status, await response.json()


async def test_the_api_lists_and_cancels_an_agents_tasks_but_not_the_nightly_jobs(tmp_path: Path) -> None:
    async with api(tmp_path) as (rt, http, base):
        once = await rt.tasks.schedule(ANA, Sender("7", "Ana"), 1, "call mum", at=soon(2))
        daily = await rt.tasks.schedule(GROUP, Sender("42", "Olga"), 1, "stand-up", cron="0 10 * * 1-5",
                                        zone="Europe/Berlin")
        others = await rt.tasks.schedule(ChatRef("web", "c1"), Sender("web", "web"), 2, "other agent", at=soon(3))
        assert len(await rt.core.repos.tasks.system_tasks(1)) == 1  # the nightly consolidation exists

        status, body = await call(http, "GET", f"{base}/api/v1/agents/1/tasks")
        assert status == 200
        tasks = body["data"]["tasks"]
        assert body["data"]["count"] == 2 and [t["taskId"] for t in tasks] == [once.id, daily.id]
        assert tasks[0] == {"taskId": once.id, "message": "call mum", "nextRun": rt.tasks.next_run_text(once),
                            "createdBy": "Ana", "timezone": "UTC", "channel": "telegram", "chatId": "7",
                            "threadId": None}
        assert tasks[1]["cron"] == "0 10 * * 1-5" and tasks[1]["threadId"] == "5"
        assert tasks[1]["nextRun"].endswith(("+01:00", "+02:00"))  # Berlin time

        status, body = await call(http, "DELETE", f"{base}/api/v1/agents/1/tasks/{others.id}")
        assert status == 404 and body["msg"] == f"Agent 1 has no task {others.id}"
        status, body = await call(http, "DELETE", f"{base}/api/v1/agents/1/tasks/{once.id}")
        assert (status, body["data"]) == (200, {"taskId": once.id, "cancelled": True})
        status, body = await call(http, "DELETE", f"{base}/api/v1/agents/1/tasks/{once.id}")
        assert status == 404
        for bad in ("abc", "0", "-3", "1.5"):
            status, _ = await call(http, "DELETE", f"{base}/api/v1/agents/1/tasks/{bad}")
            assert status in (400, 404)
        status, body = await call(http, "GET", f"{base}/api/v1/agents/1/tasks")
        assert [t["taskId"] for t in body["data"]["tasks"]] == [daily.id]
        status, _ = await call(http, "GET", f"{base}/api/v1/agents/9/tasks")
        assert status == 404


def test_matebot_tasks_lists_every_chats_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_path = tmp_path / "config.yaml"
    config_path.write_text(f"mate:\n  timezone: UTC\n  database:\n    path: {tmp_path / 'mate.db'}\n"
                           "  agents: [{id: 1, name: Mate}, {id: 2, name: Other}]\n", encoding="utf-8")

    async def schedule() -> tuple[int, int]:
        config = make_config(tmp_path, agents=[{"id": 1}, {"id": 2}])
        async with open_runtime(config, with_memory_worker=False) as rt:
            once = await rt.tasks.schedule(ANA, Sender("7", "Ana"), 1, "call\tmum\nat nine", at=soon(2))
            daily = await rt.tasks.schedule(GROUP, Sender("42", "Olga"), 2, "stand-up", cron="0 10 * * 1-5")
        return once.id, daily.id

    once_id, daily_id = asyncio.run(schedule())

    assert main(["tasks", "--config", str(config_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{once_id}\tagent 1\ttelegram:7\tnext ") and lines[0].endswith(
        "\tonce\tby Ana\tcall mum at nine")
    assert lines[1].startswith(f"{daily_id}\tagent 2\ttelegram:-1001:5\tnext ")
    assert lines[1].endswith("\tcron 0 10 * * 1-5\tby Olga\tstand-up")

    assert main(["tasks", "--agent", "2", "--config", str(config_path)]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == [str(daily_id)]
    assert main(["tasks", "--agent", "9", "--config", str(config_path)]) == 1
    assert "agent 9" in capsys.readouterr().err


async def test_migration_12_keeps_every_cron_job_and_takes_reminders(tmp_path: Path) -> None:
    db = tmp_path / "mate.db"
    with closing(sqlite3.connect(db)) as conn:  # a database as version 11 left it
        conn.create_function(SPACED_FUNCTION, 1, spaced, deterministic=True)
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
                     "applied_time TEXT NOT NULL)")
        for version, description, statements in MIGRATIONS:
            if version > 11:
                break
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, ?, '2026-01-01')", (version, description))
        conn.execute("INSERT INTO mate_agent(id, name, create_time, update_time) "
                     "VALUES (1, 'Mate', '2026-01-01', '2026-01-01')")
        for job_id in (3, 8):  # gaps in the ids, as deletions leave them
            conn.execute("INSERT INTO mate_cron_job(id, agent_id, name, cron_expression, timezone, task_type, "
                         "trigger_message, last_run_time, create_time, update_time) VALUES (?, 1, 'nightly', "
                         "'0 2 * * *', 'UTC', 'emergence', 'review', '2026-01-02', '2026-01-01', '2026-01-01')",
                         (job_id,))
        conn.commit()

    async with Database(db) as opened:
        repos = Repositories.over(opened)
        jobs = await repos.tasks.system_tasks()
        assert [(j.id, j.kind, j.last_run_time) for j in jobs] == [(3, "emergence", "2026-01-02"),
                                                                        (8, "emergence", "2026-01-02")]
        config = make_config(tmp_path)
        from bot.conversation.access import AccessPolicies
        from bot.core.prompts import PromptLibrary
        from bot.schedule.reminders.service import TaskService

        service = TaskService(config.mate.tasks, "UTC", repos.tasks, AccessPolicies.from_config(
            config.mate.channels), PromptLibrary("en"))
        task = await service.schedule(ANA, Sender("7", "Ana"), 1, "call mum", at=soon(1))
        assert task.id == 9  # ids go on after the kept rows
        assert [j.id for j in await repos.tasks.system_tasks()] == [3, 8]  # a reminder is no system job
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (LATEST_VERSION,)
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("INSERT INTO mate_cron_job(agent_id, name, cron_expression, timezone, task_type, "
                         "create_time, update_time) VALUES (1, 'x', '', 'UTC', 'bogus', '', '')")
