"""The seams of the code: no import circle, one channel port the adapters meet, a typed
runtime built without setters, one place that cleans a person's text."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bot.core.prompts import PromptLibrary
from bot.app.runtime import Runtime
from channels.base import Channel, InboundMessage, ReplyStream
from tests.support.config import make_config
from tests.support.import_graph import _cycles, _graph

if TYPE_CHECKING:
    from channels.base import RoutedReply

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "channels", "memory")
PORT_METHODS = ("run", "stop", "send")


def test_no_import_circle_counting_type_checking_imports() -> None:
    graph = _graph(PACKAGES)
    assert "channels.base" in graph and "bot.conversation.router" in graph
    assert [sorted(circle) for circle in _cycles(graph)] == []


def test_the_channel_port_imports_nothing_of_the_bot() -> None:
    # The port is what the router and the adapters share: it depends on neither.
    assert {m for m in _graph(PACKAGES)["channels.base"] if m.startswith("bot.")} == set()


async def _routed(message: InboundMessage, **_: Any) -> RoutedReply | None:
    return None


async def _console_answer(message: InboundMessage, stream: ReplyStream) -> str | None:
    return None


def _telegram(tmp_path: Path) -> object:
    from channels.telegram.adapter import TelegramChannel

    config = make_config(tmp_path, channels={"telegram": {"enabled": True, "token": "123:abc"}})
    return TelegramChannel(config.mate.channels.telegram, _routed, PromptLibrary("en"))


def _discord(tmp_path: Path) -> object:
    from channels.discord.adapter import DiscordChannel

    config = make_config(tmp_path, channels={"discord": {"enabled": True, "token": "discord-token"}})
    return DiscordChannel(config.mate.channels.discord, _routed, PromptLibrary("en"))


def _console(tmp_path: Path) -> object:
    from channels.console import ConsoleChannel

    return ConsoleChannel(_console_answer, prompts=PromptLibrary("en"))


@pytest.mark.parametrize("build", [_telegram, _discord, _console], ids=["telegram", "discord", "console"])
async def test_every_adapter_is_the_channel_the_daemon_runs(tmp_path: Path, build: Callable[[Path], object]) -> None:
    adapter = build(tmp_path)
    assert isinstance(adapter, Channel)
    assert isinstance(adapter.name, str) and isinstance(adapter.state, str)
    assert isinstance(inspect.getattr_static(type(adapter), "state"), property)
    for method in PORT_METHODS:  # the same calls, taking the same arguments, awaited the same way
        ours, port = getattr(type(adapter), method), getattr(Channel, method)
        assert inspect.iscoroutinefunction(ours), method
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(port).parameters), method


def test_the_channel_port_is_what_the_daemon_uses() -> None:
    ports = [cls for cls in Channel.__mro__ if getattr(cls, "_is_protocol", False) and cls is not typing.Protocol]
    members = {name for cls in ports for name in (*vars(cls), *cls.__annotations__) if not name.startswith("_")}
    assert members == {"name", "state", "run", "stop", "send"}


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _mentions_any(hint: Any) -> bool:
    return hint is Any or any(_mentions_any(arg) for arg in typing.get_args(hint))


@pytest.mark.parametrize("name", ["bot.app.runtime:Runtime", "bot.app.runtime:MemoryServices", "bot.app.services:Services",
                                  "bot.app.services:ApiAddress"])
def test_the_runtime_and_the_services_are_typed_field_by_field(name: str) -> None:
    module, _, cls = name.partition(":")
    hints = _hints(getattr(importlib.import_module(module), cls))
    assert "extras" not in hints
    assert [name for name, hint in hints.items() if _mentions_any(hint)] == []


def test_only_the_memory_services_are_missing_without_the_worker() -> None:
    """And the leases on SQLite, which one daemon holds alone."""
    optional = [name for name, hint in _hints(Runtime).items() if type(None) in typing.get_args(hint)]
    assert optional == ["memory_services", "leases"]


@pytest.mark.parametrize("module", ["bot/app/runtime.py", "bot/app/services.py"])
def test_the_composition_root_hands_objects_what_they_need_when_it_builds_them(module: str) -> None:
    """No setter injection: nothing built is completed afterwards (`router.commands = ...`)."""
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    set_later = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        else:
            continue
        set_later += [ast.unparse(t) for t in targets
                      if isinstance(t, ast.Attribute) and not (isinstance(t.value, ast.Name) and t.value.id == "self")]
    assert set_later == []


_SURROGATE_REPAIR = re.compile(r"""surrogatepass["']\)\s*\.decode\(""")


def test_one_module_repairs_and_cleans_text() -> None:
    repairing = sorted(str(path.relative_to(ROOT)) for package in PACKAGES for path in (ROOT / package).rglob("*.py")
                       if _SURROGATE_REPAIR.search(path.read_text(encoding="utf-8")))
    assert repairing == ["bot/core/text.py"]


def test_the_router_and_the_api_clean_with_the_text_module() -> None:
    import bot.app.api.server
    import bot.conversation.router
    import bot.core.text

    assert bot.conversation.router.clean_text is bot.core.text.clean_text and bot.conversation.router.is_blank is bot.core.text.is_blank
    assert bot.app.api.server.clean_text is bot.core.text.clean_text and bot.app.api.server.is_blank is bot.core.text.is_blank


def test_ci_type_checks_strictly() -> None:
    import tomllib

    mypy = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy.get("strict") is True and set(mypy["packages"]) == {"bot", "channels", "memory"}
