"""The walk of one message through the code: from the Telegram adapter to the reply it sends.

What: one private text message from a Telegram account on the allowlist, through the real
python-telegram-bot client on the fake Bot API, the real router, window, agent and the real
anthropic SDK on the fake Messages API, with a real SQLite file; memory extraction off, so
nothing runs beside the turn. A profiler hook records every call into this project's own code
(bot/, channels/, memory/) from the moment the update is handed to the adapter until the reply
reaches the fake Bot API, in the tasks started for it (the polling loops' own rounds are left out).

Figures: `stays` counts the stops of the walk (calls in a row inside one module are one stay, counted
in each task the message runs in, so tasks that interleave do not add stops),
`modules` the distinct modules it passes through, `climbs` the calls from a module into one of a
higher layer of the layout's rule (only for the layered tree: `null` where a module is in no
layer), and `path` the modules in the order first entered.

How: `python -m bench.message_walk` (a few seconds). It runs on this tree's module names and on
the tree before the layout's moves (the older names are tried second), so one script gives the
before and after figures: check out the older commit in a worktree and run it there.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: tests.support comes from the project
    sys.path.insert(0, str(ROOT))

try:  # the layout's rule, as the tests check it; a tree from before the layout has none
    from tests.support.import_graph import LAYERS
except ImportError:
    LAYERS = ()
PRODUCT = ("bot", "channels", "memory")


def _first(*names: str) -> Any:
    """The first of these `module:attribute` names that imports (this tree's, then the older one's)."""
    for name in names:
        module, attribute = name.split(":")
        try:
            return getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"none of {names} imports")


def layer_of(module: str) -> int | None:
    best, found = -1, None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    return found


class Walk:
    """Records the project's modules entered, in order, while `on` is set."""

    def __init__(self) -> None:
        self.on = False
        self.stays: list[str] = []
        self.climbs: int | None = 0
        self.before: set[asyncio.Task[Any]] = set()  # what ran before the message: polling loops
        self.last: dict[asyncio.Task[Any], str] = {}  # each task's module now: tasks interleave

    def start(self) -> None:
        self.before = asyncio.all_tasks()
        self.on = True

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.on or event != "call":
            return
        try:
            task = asyncio.current_task()
        except RuntimeError:
            return
        if task is None or task in self.before:  # the long-lived loops' next round, not this message
            return
        module = _module_of(frame.f_code.co_filename)
        if module is None or self.last.get(task) == module:
            return
        self.last[task] = module
        caller = _caller_module(frame)
        if caller is not None and caller != module and self.climbs is not None:
            low, high = layer_of(caller), layer_of(module)
            if low is None or high is None:
                self.climbs = None
            elif high > low:
                self.climbs += 1
        self.stays.append(module)


def _module_of(filename: str) -> str | None:
    try:
        relative = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[0] not in PRODUCT or relative.suffix != ".py":
        return None
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _caller_module(frame: FrameType) -> str | None:
    back = frame.f_back
    while back is not None:
        module = _module_of(back.f_code.co_filename)
        if module is not None:
            return module
        back = back.f_back
    return None


async def measure() -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    fake_telegram = _first("tests.support.fakes.telegram:FakeTelegram", "tests.fakes.telegram:FakeTelegram")
    fake_anthropic = _first("tests.support.fakes.anthropic:FakeAnthropic", "tests.fakes.anthropic:FakeAnthropic")
    open_runtime = _first("bot.app.runtime:open_runtime", "bot.runtime:open_runtime")
    client_class = _first("bot.llm:AnthropicClient")
    channel_class = _first("channels.telegram.adapter:TelegramChannel")
    parse_config = _first("bot.core.config:parse_config", "bot.config:parse_config")

    walk = Walk()
    with tempfile.TemporaryDirectory() as tmp:
        async with fake_telegram() as tg, fake_anthropic() as llm:
            llm.reply_text("hello from the model")
            config = parse_config({"mate": {
                "database": {"path": str(Path(tmp) / "mate.db")}, "timezone": "UTC",
                "llm": {"api-key": "sk-walk", "base-url": llm.url, "max-retries": 0, "stream": False},
                "memory": {"auto-summarize-enabled": False, "emergence-enabled": False},
                "channels": {"telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url,
                                          "allowed-users": [42], "admins": [42]}},
            }}, environ={})
            async with client_class(config.mate.llm) as client, open_runtime(config, llm=client) as rt:
                channel = channel_class(config.mate.channels.telegram, rt.router.handle, rt.core.prompts,
                                        access=rt.access.telegram, poll_timeout=0.2)
                running = asyncio.create_task(channel.run())
                try:
                    # A first message warms every lazy import and cache: the second one is measured.
                    tg.push_text("hello", chat_id=42, user_id=42)
                    await tg.wait_for_sent(1, timeout=60)
                    llm.reply_text("hello again")
                    sys.setprofile(walk)
                    walk.start()
                    tg.push_text("what is on today?", chat_id=42, user_id=42)
                    await tg.wait_for_sent(2, timeout=60)
                    walk.on = False
                    sys.setprofile(None)
                finally:
                    await channel.stop()
                    await asyncio.wait_for(running, 30)
    path: list[str] = []
    for module in walk.stays:
        if module not in path:
            path.append(module)
    return {"bench": "message_walk", "stays": len(walk.stays), "modules": len(path), "climbs": walk.climbs,
            "path": path}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    del argv  # nothing to set: one message, one walk
    result = asyncio.run(measure())
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
