"""`matebot memory import` reads only real files inside the folder: a symbolic link refuses the import (SPEC S30)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.__main__ import main

REPO = Path(__file__).resolve().parents[2]
SECRET = "SECRET-OUTSIDE-THE-FOLDER"


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"mate:\n  timezone: UTC\n  database:\n    path: {tmp_path / 'mate.db'}\n", encoding="utf-8")
    return path


def _exported(tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """An exported workspace whose MEMORY.md was then edited: what an import would bring back."""
    folder = tmp_path / "export"
    assert main(["memory", "export", "--agent", "1", str(folder), "--config", str(config)]) == 0
    (folder / "MEMORY.md").write_text("# Memory\n- edited in the folder\n", encoding="utf-8")
    capsys.readouterr()
    return folder


def _outside_file(tmp_path: Path) -> Path:
    outside = tmp_path / "elsewhere" / "secret.md"
    outside.parent.mkdir()
    outside.write_text(f"# Not yours\n{SECRET}\n", encoding="utf-8")
    return outside


def _file_outside(folder: Path, tmp_path: Path) -> str:
    (folder / "PROFILE.md").unlink()
    (folder / "PROFILE.md").symlink_to(_outside_file(tmp_path))
    return "PROFILE.md"


def _etc_passwd(folder: Path, tmp_path: Path) -> str:
    (folder / "passwd.md").symlink_to("/etc/passwd")
    return "passwd.md"


def _folder_outside(folder: Path, tmp_path: Path) -> str:
    _outside_file(tmp_path)
    (folder / "memory").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    return "memory"


def _manifest_outside(folder: Path, tmp_path: Path) -> str:
    manifest = folder / ".matebot-workspace.json"
    outside = tmp_path / "manifest.json"
    outside.write_text(manifest.read_text(encoding="utf-8"), encoding="utf-8")
    manifest.unlink()
    manifest.symlink_to(outside)
    return ".matebot-workspace.json"


def _inside(folder: Path, tmp_path: Path) -> str:
    (folder / "copy.md").symlink_to(folder / "SOUL.md")
    return "copy.md"


def _dangling(folder: Path, tmp_path: Path) -> str:
    (folder / "gone.md").symlink_to(tmp_path / "no-such-file.md")
    return "gone.md"


@pytest.mark.parametrize("plant", [_file_outside, _etc_passwd, _folder_outside, _manifest_outside, _inside,
                                   _dangling])
def test_a_symbolic_link_refuses_the_whole_import_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], plant: Callable[[Path, Path], str]) -> None:
    config = _config(tmp_path)
    folder = _exported(tmp_path, config, capsys)
    link = plant(folder, tmp_path)

    assert main(["memory", "import", "--agent", "1", str(folder), "--config", str(config)]) == 1

    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert line.startswith(f"matebot: {link} is a symbolic link") and "nothing was imported" in line
    assert captured.out == "" and SECRET not in captured.err and "root:" not in captured.err
    assert main(["memory", "show", "--agent", "1", "--config", str(config)]) == 0
    listed = [row.split("\t")[0] for row in capsys.readouterr().out.splitlines()]
    assert listed == ["AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"]  # nothing new
    for name in ("MEMORY.md", "PROFILE.md"):  # nothing changed: not even the folder's real edit
        assert main(["memory", "show", "--agent", "1", name, "--config", str(config)]) == 0
        shown = capsys.readouterr().out
        assert SECRET not in shown and "edited in the folder" not in shown


def test_several_links_are_counted_in_the_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    folder = _exported(tmp_path, config, capsys)
    _file_outside(folder, tmp_path)
    _etc_passwd(folder, tmp_path)
    _dangling(folder, tmp_path)

    assert main(["memory", "import", "--agent", "1", str(folder), "--config", str(config)]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("matebot: PROFILE.md is a symbolic link (to ") and ", and 2 more:" in line


def test_other_links_in_the_folder_are_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A link the import would neither read nor enter (not a .md file) does not stop it."""
    config = _config(tmp_path)
    folder = _exported(tmp_path, config, capsys)
    (folder / "notes.txt").symlink_to("/etc/passwd")

    assert main(["memory", "import", "--agent", "1", str(folder), "--config", str(config)]) == 0
    assert main(["memory", "show", "--agent", "1", "MEMORY.md", "--config", str(config)]) == 0
    assert "edited in the folder" in capsys.readouterr().out


def test_the_real_command_refuses_a_link_out_of_the_folder(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    folder = _exported(tmp_path, config, capsys)
    _file_outside(folder, tmp_path)

    done = subprocess.run([sys.executable, "-m", "bot", "memory", "import", "--agent", "1", str(folder),
                           "--config", str(config)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})

    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"matebot: PROFILE.md is a symbolic link (to {tmp_path / 'elsewhere' / 'secret.md'}): an import reads "
        "only real files inside the folder, so nothing was imported"]
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert main(["memory", "show", "--agent", "1", "PROFILE.md", "--config", str(config)]) == 0
    assert SECRET not in capsys.readouterr().out
