"""The layer rule of the layout: imports only run downwards,

    core, channels/base  <-  storage  <-  llm  <-  {media, memory}  <-  conversation
        <-  schedule  <-  features  <-  channel adapters  <-  app

counting imports made only for type checking (a port belongs to the layer that calls it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.import_graph import LAYERS, _graph

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "channels", "memory")


def layer_of(module: str) -> int:
    """The layer of `module`: the one whose most specific prefix names it."""
    best, found = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    if found < 0:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS")
    return found


def test_every_module_is_in_a_layer() -> None:
    for module in _graph(PACKAGES):
        layer_of(module)


def test_imports_run_only_downwards() -> None:
    upward = sorted(f"{module} -> {imported}" for module, imports in _graph(PACKAGES).items()
                    for imported in imports if layer_of(imported) > layer_of(module))
    assert upward == []


@pytest.mark.parametrize(("module", "layer"), [
    ("bot.core.config", 0), ("bot.core.config.llm", 0), ("channels.base", 0), ("channels.streaming", 0), ("bot.storage.database", 1),
    ("bot.llm.port", 2), ("memory.worker", 3), ("bot.media.voice", 3), ("bot.conversation.router", 4),
    ("bot.schedule.timer", 5), ("channels.telegram.adapter", 7), ("channels.discord.adapter", 7),
    ("bot.app.daemon", 8), ("bot.__main__", 8),
])
def test_the_layers_are_read_as_the_layout_says(module: str, layer: int) -> None:
    assert layer_of(module) == layer


def test_memory_names_no_channel() -> None:
    # Memory serves every channel alike: which channels exist, and how their chats are keyed,
    # is known by channels/ and the app that wires them.
    named = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "memory").rglob("*.py")
                   if re.search(r"telegram|discord|\"tg:|\"dc:", path.read_text(encoding="utf-8"), re.I))
    assert named == []


def test_a_conversation_key_is_built_and_parsed_in_one_module() -> None:
    # Only channels/base.py knows the short forms ("tg:", "dc:") keys are written with (a
    # migration, written once for the keys of its day, is history and keeps its SQL).
    writers = sorted(str(path.relative_to(ROOT)) for package in PACKAGES for path in (ROOT / package).rglob("*.py")
                     if re.search(r"[\"'](tg|dc):?[\"']|[\"'](tg|dc):", path.read_text(encoding="utf-8")))
    assert writers == ["bot/storage/migrations/v10.py", "channels/base.py"]


def test_the_incognito_rule_is_written_once() -> None:
    # "Messages of a chat in incognito are never read for memory, search or vectors": one clause
    # (bot/storage/remembered.py) that every such query and the index's triggers are built from.
    writers = sorted(str(path.relative_to(ROOT)) for package in PACKAGES for path in (ROOT / package).rglob("*.py")
                     if re.search(r"(FROM|JOIN) mate_incognito i\b", path.read_text(encoding="utf-8")))
    assert writers == ["bot/storage/remembered.py"]


def test_a_file_version_has_one_writer() -> None:
    # Create, replace, append, delete: bot/storage/file_versions.py writes a file's content and
    # its history row together (a benchmark's bulk loader, plain sqlite3 outside the daemon, aside).
    writers = sorted(str(path.relative_to(ROOT)) for package in PACKAGES for path in (ROOT / package).rglob("*.py")
                     if re.search(r"UPDATE mate_workspace_file SET (content|deleted)|INTO mate_workspace_file(_history)?\(",
                                  path.read_text(encoding="utf-8")))
    assert writers == ["bot/storage/bulk_load.py", "bot/storage/file_versions.py"]


def test_the_api_reads_memory_files_from_the_workspace_not_the_models_tool() -> None:
    # One service per feature for every door: the HTTP API asks the workspace service, and never
    # runs the model's tool to parse the JSON it writes for the model.
    server = (ROOT / "bot" / "app" / "api" / "server.py").read_text(encoding="utf-8")
    assert "memory_tool" not in server and "json.loads(result.content)" not in server
