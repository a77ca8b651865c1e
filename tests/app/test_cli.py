from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from bot.__main__ import main

REPO = Path(__file__).resolve().parents[2]


def _write_config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"mate:\n  timezone: UTC\n  database:\n    path: {tmp_path / 'mate.db'}\n{extra}",
                    encoding="utf-8")
    return path


def test_check_config_masks_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-very-secret")
    assert main(["check-config", "--config", str(REPO / "config.yaml")]) == 0
    out = capsys.readouterr().out
    assert "sk-ant-very-secret" not in out
    assert "api-key: '***'" in out
    assert "cooldown-minutes: 5" in out


def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = _write_config(tmp_path, "  memory:\n    cooldown-minutes: -1\n")
    done = subprocess.run([sys.executable, "-m", "bot", "--config", str(bad), "check-config"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "matebot: config error: mate.memory.cooldown-minutes: must be >= 0"
    ]
    assert "Traceback" not in done.stderr


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["memory", "show"])
    assert caught.value.code == 2


@pytest.mark.parametrize("agent", ["9" * 5000, "99999999999999999999", "0", "-1", "1e3"])
def test_an_odd_agent_id_is_a_usage_error_without_echo(agent: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["memory", "show", "--agent", agent])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "whole number" in err and "Traceback" not in err and "9" * 30 not in err


def test_memory_show_lists_and_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write_config(tmp_path)
    assert main(["memory", "show", "--agent", "1", "--config", str(config)]) == 0
    listing = capsys.readouterr().out
    assert [line.split("\t")[0] for line in listing.splitlines()] == [
        "AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"
    ]
    assert main(["memory", "show", "--agent", "1", "MEMORY.md", "--config", str(config)]) == 0
    assert "MEMORY" in capsys.readouterr().out.upper()
    assert main(["memory", "show", "--agent", "9", "--config", str(config)]) == 1
    assert "agent 9 does not exist" in capsys.readouterr().err


def test_export_import_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write_config(tmp_path)
    out = tmp_path / "export"
    assert main(["memory", "export", "--agent", "1", str(out), "--config", str(config)]) == 0
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.md")) == [
        "AGENTS.md", "MEMORY.md", "PROFILE.md", "SOUL.md"
    ]
    (out / "MEMORY.md").write_text("# Memory\n\n- 用户喜欢咖啡\n", encoding="utf-8")
    (out / "memory").mkdir()
    (out / "memory" / "2026-04-01.md").write_text("# 2026-04-01\n\n- met Bob\n", encoding="utf-8")
    assert main(["memory", "import", "--agent", "1", str(out), "--config", str(config)]) == 0
    capsys.readouterr()
    assert main(["memory", "show", "--agent", "1", "MEMORY.md", "--config", str(config)]) == 0
    assert "用户喜欢咖啡" in capsys.readouterr().out
    second = tmp_path / "export2"
    assert main(["memory", "export", "--agent", "1", str(second), "--config", str(config)]) == 0
    for path in out.rglob("*.md"):
        assert (second / path.relative_to(out)).read_bytes() == path.read_bytes()
    listing_ok = main(["memory", "show", "--agent", "1", "--config", str(config)]) == 0
    listing = capsys.readouterr().out
    assert listing_ok and "memory/2026-04-01.md\tdisabled" in listing


def test_import_refuses_hostile_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write_config(tmp_path)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "ok.md").write_text("fine", encoding="utf-8")
    (folder / "bad\u202ename.md").write_text("evil", encoding="utf-8")
    assert main(["memory", "import", "--agent", "1", str(folder), "--config", str(config)]) == 1
    assert "refused" in capsys.readouterr().err


async def test_memory_emerge_and_summarize_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from bot.app.cli.memory import memory_emerge, memory_summarize
    from bot.core.config import load_config
    from tests.support.fakes.anthropic import FakeAnthropic

    async with FakeAnthropic() as fake:
        path = _write_config(tmp_path, f"  llm:\n    api-key: k\n    base-url: {fake.url}\n    max-retries: 0\n")
        config = load_config(path, environ={})
        assert await memory_emerge(config, argparse.Namespace(agent=1)) == 0
        assert "skipped" in capsys.readouterr().out
        assert fake.messages_requests() == []

        from bot.app.core import open_core

        async with open_core(config) as core:
            await core.workspace.write(1, "memory/2026-04-01.md", "- likes green tea")
            await core.repos.conversations.create("console:me", agent_id=1, channel="console",
                                                  chat_key="console:me", trigger_source="console")
            await core.repos.messages.add_many("console:me", [
                ("user", "I really like green tea in the morning", 9), ("assistant", "Noted!", 2),
                ("user", "And I go running every Sunday with Bob", 9), ("assistant", "Great.", 2)])
        fake.reply_text('{"should_update": true, "reason": "habit", "memory_content": "# Memory\\n- green tea"}')
        assert await memory_emerge(config, argparse.Namespace(agent=1)) == 0
        assert "MEMORY.md updated" in capsys.readouterr().out
        fake.reply_text('{"should_update": true, "reason": "running", "daily_entry": "- runs on Sundays",'
                        ' "memory_update": "", "profile_update": ""}')
        done = await memory_summarize(config, argparse.Namespace(agent=1, conversation="console:me"))
        assert done == 0, capsys.readouterr()
        assert "completed" in capsys.readouterr().out
        assert await memory_summarize(config, argparse.Namespace(agent=1, conversation="nope")) == 1
        async with open_core(config) as core:
            assert (await core.workspace.get(1, "MEMORY.md")).content == "# Memory\n- green tea"
            notes = [f.content for f in await core.workspace.list(1, "memory/") if "2026-04-01" not in f.filename]
            assert len(notes) == 1 and "- runs on Sundays" in notes[0]


def _listing(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    assert main(["memory", "show", "--agent", "1", "--config", str(config)]) == 0
    return {line.split("\t")[0]: line.split("\t") for line in capsys.readouterr().out.splitlines()}


def test_import_applies_flags_when_the_content_is_unchanged(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    config = _write_config(tmp_path)
    out = tmp_path / "export"
    assert main(["memory", "export", "--agent", "1", str(out), "--config", str(config)]) == 0
    manifest_path = out / ".matebot-workspace.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    assert manifest["files"]["MEMORY.md"]["enabled"] is True
    manifest["files"]["MEMORY.md"] = {"enabled": False, "sort_order": 7}
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    capsys.readouterr()
    assert main(["memory", "import", "--agent", "1", str(out), "--config", str(config)]) == 0
    assert "imported 0 files, 3 unchanged, 1 with new flags" in capsys.readouterr().out
    assert _listing(config, capsys)["MEMORY.md"][1].strip() == "disabled"
    second = tmp_path / "again"
    assert main(["memory", "export", "--agent", "1", str(second), "--config", str(config)]) == 0
    again = json.loads((second / ".matebot-workspace.json").read_text(encoding="utf-8"))
    assert again["files"]["MEMORY.md"] == {"enabled": False, "sort_order": 7}


def test_memory_enable_and_disable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write_config(tmp_path)
    assert main(["memory", "disable", "--agent", "1", "PROFILE.md", "--config", str(config)]) == 0
    assert "PROFILE.md disabled" in capsys.readouterr().out
    assert _listing(config, capsys)["PROFILE.md"][1].strip() == "disabled"
    assert main(["memory", "enable", "--agent", "1", "PROFILE.md", "--config", str(config)]) == 0
    capsys.readouterr()
    assert _listing(config, capsys)["PROFILE.md"][1].strip() == "enabled"
    assert main(["memory", "enable", "--agent", "1", "NOPE.md", "--config", str(config)]) == 1
    assert capsys.readouterr().err.strip() == "matebot: agent 1 has no file NOPE.md"


def test_conversations_lists_ids_with_last_activity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.app.core import open_core
    from bot.core.config import load_config

    config = _write_config(tmp_path, "  agents:\n    - id: 1\n    - id: 2\n      name: Two\n")

    async def seed() -> None:
        async with open_core(load_config(config, environ={})) as core:
            for cid, agent in (("telegram:5", 1), ("web:team", 2), ("console:me", 1)):
                await core.repos.conversations.create(cid, agent_id=agent, channel=cid.split(":")[0],
                                                      chat_key=cid, trigger_source="user")
            await asyncio.sleep(0.01)  # stored times have millisecond precision
            await core.repos.messages.add_many("web:team", [("user", "hello", 1), ("assistant", "hi", 1)])
            await asyncio.sleep(0.01)
            await core.repos.messages.add_many("telegram:5", [("user", "later", 1)])

    asyncio.run(seed())
    assert main(["conversations", "--config", str(config)]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [line[0] for line in lines] == ["telegram:5", "web:team", "console:me"]
    assert lines[1][1:4] == ["agent 2", "web", "2 messages"] and lines[0][-1].startswith("last 20")
    assert main(["conversations", "--agent", "1", "--config", str(config)]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == ["telegram:5", "console:me"]
    assert main(["conversations", "--agent", "9", "--config", str(config)]) == 1
    assert "agent 9 does not exist" in capsys.readouterr().err


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_transfer_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write_config(tmp_path)
    out = tmp_path / "export"
    assert main(["memory", "export", "--agent", "1", str(out), "--config", str(config)]) == 0
    capsys.readouterr()
    (out / "MEMORY.md").write_text("# Memory\n- changed\n", encoding="utf-8")
    manifest = out / ".matebot-workspace.json"
    for broken, expected in (("{not json", "not valid JSON"), ('{"files": []}', "expected an object"),
                             ('{"files": {"MEMORY.md": {"enabled": "yes"}}}', "enabled must be true or false")):
        manifest.write_text(broken, encoding="utf-8")
        assert main(["memory", "import", "--agent", "1", str(out), "--config", str(config)]) == 1
        assert expected in _one_line_error(capsys)
        assert main(["memory", "show", "--agent", "1", "MEMORY.md", "--config", str(config)]) == 0
        assert "changed" not in capsys.readouterr().out  # nothing was imported
    manifest.unlink()
    (out / "memory").mkdir()
    (out / "memory" / "2026-01-01.md").write_bytes(b"caf\xe9 latin-1\n")
    assert main(["memory", "import", "--agent", "1", str(out), "--config", str(config)]) == 1
    assert _one_line_error(capsys) == "matebot: refused memory/2026-01-01.md: not UTF-8 text"
    assert main(["memory", "show", "--agent", "1", "MEMORY.md", "--config", str(config)]) == 0
    assert "changed" in capsys.readouterr().out  # the readable files were imported
    occupied = tmp_path / "a-file"
    occupied.write_text("x", encoding="utf-8")
    assert main(["memory", "export", "--agent", "1", str(occupied), "--config", str(config)]) == 1
    assert "exists and is not a folder" in _one_line_error(capsys)
    assert main(["memory", "import", "--agent", "1", str(occupied), "--config", str(config)]) == 1
    assert "is not a folder" in _one_line_error(capsys)


def test_export_names_a_file_the_file_system_cannot_hold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.app.core import open_core
    from bot.core.config import load_config

    config = _write_config(tmp_path)
    long_name = "n" * 253 + ".md"  # 256 characters: a valid workspace name, too long for a file name

    async def seed() -> None:
        async with open_core(load_config(config, environ={})) as core:
            await core.workspace.write(1, long_name, "long")

    asyncio.run(seed())
    out = tmp_path / "export"
    assert main(["memory", "export", "--agent", "1", str(out), "--config", str(config)]) == 1
    assert _one_line_error(capsys).startswith(f"matebot: not exported {long_name}: the name is longer than 255")
    assert (out / "MEMORY.md").exists()


def test_check_config_masks_url_credentials_and_names_the_provider(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    config = _write_config(tmp_path, "  llm:\n    base-url: https://bob:hunter2pass@proxy.example/v1\n")
    assert main(["check-config", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "hunter2pass" not in out and "https://***@proxy.example/v1" in out
    assert "# provider auto resolves to: anthropic, model " in out  # a base-url alone is enough
    keyed = _write_config(tmp_path, "  llm:\n    api-key: sk-ant-abcdef123456\n")
    assert main(["check-config", "--config", str(keyed)]) == 0
    out = capsys.readouterr().out
    assert "sk-ant-abcdef123456" not in out and "# provider auto resolves to: anthropic, model " in out


def _is_request_for(recorded: object, marker: str) -> bool:
    return marker in json.dumps(getattr(recorded, "body", {}).get("system", ""))


async def test_memory_commands_beside_a_daemon_are_done_by_the_daemon_and_its_model(tmp_path: Path) -> None:
    """The key lives in the daemon's environment (systemd's env file), not in the shell that
    runs the command: run here, the command had no model and reported success all the same."""
    from tests.support.daemon_process import clean_env, daemon, free_port, matebot
    from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply

    extraction = json.dumps({"should_update": True, "reason": "stable facts", "daily_entry": "- Bruno keeps bees",
                             "memory_update": "", "profile_update": ""})
    consolidation = json.dumps({"should_update": True, "reason": "bees", "memory_content": "# Memory\n- bees"})

    def respond(recorded: RecordedRequest) -> Script:
        if _is_request_for(recorded, "memory_content"):
            return TextReply(consolidation)
        return TextReply(extraction if _is_request_for(recorded, "daily_entry") else "Nice!")

    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        "mate:\n  timezone: UTC\n  llm:\n    api-key: ${ANTHROPIC_API_KEY:-}\n    base-url: ${ANTHROPIC_BASE_URL:-}\n"
        "    max-retries: 0\n  memory:\n    auto-summarize-enabled: false\n"
        f"  channels:\n    console:\n      enabled: false\n  api:\n    port: {port}\n", encoding="utf-8")
    async with FakeAnthropic() as fake:
        fake.responder = respond
        with_key = clean_env(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=fake.url)
        async with daemon(config, port, env=with_key) as running, aiohttp.ClientSession() as http:
            for text in ("Hi, my name is Bruno.", "I keep bees on my roof in Lisbon."):
                async with http.post(f"{running.base}/api/v1/chat/1", headers=running.auth,
                                     json={"conversationId": "c1", "message": text}) as response:
                    assert response.status == 200
            summarized = await matebot("memory", "summarize", "--agent", "1", "--conversation", "web:c1",
                                       cwd=tmp_path)  # no key in this command's environment
            emerged = await matebot("memory", "emerge", "--agent", "1", cwd=tmp_path)
            missing = await matebot("memory", "summarize", "--agent", "1", "--conversation", "web:nope",
                                    cwd=tmp_path)
    assert summarized.code == 0, summarized.err
    assert summarized.out.startswith("Memory extraction: completed"), summarized.out
    assert emerged.code == 0 and emerged.out.startswith("Memory consolidated: MEMORY.md updated"), emerged
    assert [_is_request_for(r, "daily_entry") or _is_request_for(r, "memory_content")
            for r in fake.requests].count(True) == 2  # the daemon's model did both
    assert missing.code == 1 and missing.err.splitlines()[-1].startswith("matebot: the running matebot refused: "
                                                                         "HTTP 404"), missing.err
    for done in (summarized, emerged, missing):
        assert "test-key" not in done.out + done.err and "Traceback" not in done.err


async def test_memory_commands_without_a_model_beside_a_daemon_without_api_refuse(tmp_path: Path) -> None:
    from tests.support.daemon_process import daemon, matebot

    config = tmp_path / "config.yaml"
    config.write_text("mate:\n  timezone: UTC\n  channels:\n    console:\n      enabled: false\n"
                      "  api:\n    enabled: false\n", encoding="utf-8")
    async with daemon(config, 0):
        done = await matebot("memory", "emerge", "--agent", "1", cwd=tmp_path)
    assert done.code == 1
    [line] = done.err.splitlines()
    assert line.startswith("matebot: a matebot daemon is running on data/mate.db with its API off"), line
