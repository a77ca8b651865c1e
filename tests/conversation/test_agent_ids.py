"""Agents cannot collide: per-chat agents keep their ids, configured ids and routes are checked (SPEC S19)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.app.core import open_core
from bot.core.errors import ConfigError
from tests.support.config import make_config

REPO = Path(__file__).resolve().parents[2]


async def _group_gets_agent_2(tmp_path: Path) -> None:
    async with open_core(make_config(tmp_path)) as core:
        assert await core.agents.for_chat("tg:-100", "Family group") == 2
        await core.workspace.write(2, "MEMORY.md", "the family's memory")


async def test_a_configured_id_held_by_a_group_agent_stops_start_up(tmp_path: Path) -> None:
    await _group_gets_agent_2(tmp_path)
    config = make_config(tmp_path, agents=[{"id": 1, "name": "Mate"}, {"id": 2, "name": "Work"}])
    with pytest.raises(ConfigError) as caught:
        async with open_core(config):
            pass
    assert str(caught.value).startswith("mate.agents: id 2 already belongs to the agent created for the chat tg:-100")
    async with open_core(make_config(tmp_path)) as core:  # nothing was renamed or mixed up
        assert (await core.agents.get(2)).name == "Family group"
        assert (await core.workspace.read_text(2, "MEMORY.md"))[0] == "the family's memory"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)


async def test_check_config_and_run_name_mate_agents_for_a_taken_id(tmp_path: Path) -> None:
    await _group_gets_agent_2(tmp_path)
    path = tmp_path / "config.yaml"
    path.write_text(f"mate:\n  timezone: UTC\n  database: {{path: {tmp_path / 'mate.db'}}}\n"
                    "  llm: {provider: offline}\n  api: {enabled: false}\n  channels: {console: {enabled: false}}\n"
                    "  agents: [{id: 1, name: Mate}, {id: 2, name: Work}]\n", encoding="utf-8")
    for command in (["check-config", "--config", str(path)], ["run", "--config", str(path)]):
        done = _cli(*command, cwd=tmp_path)  # `run` opens data/matebot.log there
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            "matebot: config error: mate.agents: id 2 already belongs to the agent created for the chat "
            "tg:-100; give the configured agent an id that is not in use"], done.stderr


def test_a_route_to_an_agent_that_is_not_configured_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(tmp_path, routing=[{"channel": "*", "chat": "direct", "agent": 5}])
    assert str(caught.value) == "mate.routing.0.agent: agent 5 is not configured in mate.agents"


async def test_a_new_group_agent_has_its_seed_files_and_cron_job(tmp_path: Path) -> None:
    async with open_core(make_config(tmp_path)) as core:
        agent_id = await core.agents.for_chat("dc:55", "Server")
        files = [f.filename for f in await core.workspace.list(agent_id)]
        jobs = await core.repos.tasks.system_tasks(agent_id)
        injection = await core.workspace.injection(agent_id)
    assert files == ["AGENTS.md", "SOUL.md", "MEMORY.md"]  # a group keeps one profile per member instead
    assert [(j.name, j.kind) for j in jobs] == [("memory-emergence", "text")]
    assert "--- AGENTS.md ---" in injection


async def test_too_few_tool_rounds_for_the_review_seed_a_direct_consolidation_job(tmp_path: Path) -> None:
    async with open_core(make_config(tmp_path, agent={"max-tool-rounds": 2})) as core:
        jobs = await core.repos.tasks.system_tasks(1)
    assert [j.kind for j in jobs] == ["emergence"]


async def test_the_nightly_review_fits_in_three_tool_rounds(tmp_path: Path) -> None:
    from bot.schedule.system_tasks import SystemTaskRunner
    from bot.llm import AnthropicClient
    from bot.app.runtime import open_runtime
    from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest

    notes = [f"memory/2026-04-0{day}.md" for day in range(1, 8)]

    def read_all(request: RecordedRequest) -> dict[str, object]:
        blocks = [{"type": "tool_use", "id": f"toolu_read{i}", "name": "read_workspace_memory_file",
                   "input": {"agentId": 1, "filename": name}} for i, name in enumerate(notes)]
        return {"id": "msg_reads", "type": "message", "role": "assistant", "model": "m", "content": blocks,
                "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 9, "output_tokens": 9}}

    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
                             agent={"max-tool-rounds": 3})
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt:
            for name in notes:
                await rt.core.workspace.write(1, name, f"# {name[7:17]}\n\n- practised guitar")
            await rt.core.workspace.write(1, "MEMORY.md", "# Memory\n- nothing yet\n")
            (job,) = await rt.core.repos.tasks.system_tasks(1)
            fake.reply_tool_use("list_workspace_memory_files", {"agentId": 1, "filenamePrefix": "memory/"})
            fake.reply_with(read_all)
            fake.reply_tool_use("edit_workspace_memory_file", {"agentId": 1, "filename": "MEMORY.md",
                                                               "oldText": "- nothing yet", "newText": "- plays guitar daily"})
            fake.reply_text("Noted the daily guitar practice.")
            emergence = rt.memory_services.emergence
            await SystemTaskRunner(rt.router, emergence, rt.consolidation_turns,
                                      rt.core.repos.search_index)(job)
            memory, _ = await rt.core.workspace.read_text(1, "MEMORY.md")
        first = fake.messages_requests()[0]
    assert "at most 3 rounds" in job.message and "MEMORY.md is already in your system prompt" in job.message
    assert job.message in str(first["messages"][-1]["content"])
    assert memory == "# Memory\n- plays guitar daily\n"
    assert len(fake.messages_requests()) == 4 and fake.pending() == 0
