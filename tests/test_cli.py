from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.__main__ import main

REPO = Path(__file__).resolve().parent.parent


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
