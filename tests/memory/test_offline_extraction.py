"""Offline mode never marks a conversation analysed: a later start with a model extracts what was said."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bot.core.config import Config
from bot.app.daemon import run_daemon
from bot.app.runtime import Runtime
from channels.base import InboundMessage
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, is_memory_extraction
from tests.support.memory_env import between, user_prompt

CONVERSATION = "console:owner"
SAID_OFFLINE = ["remember that I keep bees on my roof in Lisbon",
                "my sister Ana lives in Porto and visits every May",
                "I am learning Portuguese, two lessons a week"]
MEMORY_REPLY = json.dumps({
    "should_update": True, "reason": "stable facts", "daily_entry": "- keeps bees; sister Ana in Porto",
    "memory_update": "# Memory\n\n- learning Portuguese (two lessons a week)",
    "profile_update": "# Profile\n\n- City: Lisbon\n- Keeps bees\n- Sister: Ana (Porto)",
})


def _is_memory_request(recorded: RecordedRequest) -> bool:
    return is_memory_extraction(recorded.body)


async def _wait_for(condition: Callable[[], Any], what: str, timeout: float = 60) -> None:
    """Poll `condition` (plain or async) until it holds, bounded by `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await _value(condition()):
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


@asynccontextmanager
async def _daemon(config: Config) -> AsyncIterator[Runtime]:
    """`matebot run` in this process on the config's database file, stopped on exit."""
    stop = asyncio.Event()
    started: list[Runtime] = []
    daemon = asyncio.create_task(run_daemon(config, stop=stop, console=False,
                                            ready=lambda rt, _services: started.append(rt)))
    try:
        await _wait_for(lambda: started or daemon.done(), "the daemon to start")
        assert started, daemon.result()
        yield started[0]
    finally:
        stop.set()
        assert await asyncio.wait_for(daemon, 30) == 0


async def _value(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


def _config(tmp_path: Path, llm: dict[str, Any]) -> Config:
    return make_config(tmp_path, llm=llm, api={"enabled": False}, channels={"console": {"enabled": False}})


async def test_what_was_said_offline_is_extracted_once_a_model_is_configured(tmp_path: Path) -> None:
    async with _daemon(_config(tmp_path, {"provider": "offline"})) as rt:
        for text in SAID_OFFLINE:
            reply = await rt.router.handle(InboundMessage("console", "owner", "owner", "owner", text,
                                                          trigger_source="console"))
            assert reply is not None and reply.text.startswith("(offline)")
        worker = rt.memory_services.worker
        assert await worker.drain(10)
        conversation = await rt.core.repos.conversations.get(CONVERSATION)
        assert conversation is not None and conversation.memory_upto_message_id == 0  # not marked analysed
        assert await rt.core.repos.memory_pending.get(CONVERSATION) is not None  # kept for later
        assert "Lisbon" not in (await rt.core.workspace.read_text(1, "PROFILE.md"))[0]

    async with FakeAnthropic() as fake:
        def respond(recorded: RecordedRequest) -> Script:
            return TextReply(MEMORY_REPLY if _is_memory_request(recorded) else "ok")

        fake.responder = respond
        config = _config(tmp_path, {"api-key": "test-key", "base-url": fake.url, "max-retries": 0})
        async with _daemon(config) as rt:
            async def extracted() -> bool:
                pending = await rt.core.repos.memory_pending.get(CONVERSATION)
                return pending is None and "Lisbon" in (await rt.core.workspace.read_text(1, "PROFILE.md"))[0]

            await _wait_for(extracted, "the offline messages to be extracted")
            (request,) = [r.body for r in fake.requests if _is_memory_request(r)]
            transcript = between(user_prompt(request), "<transcript>\n", "\n</transcript>")
            assert [line for line in transcript.splitlines() if line.startswith("User: ")] == [
                f"User: {text}" for text in SAID_OFFLINE]
            assert "Portuguese" in (await rt.core.workspace.read_text(1, "MEMORY.md"))[0]
            conversation = await rt.core.repos.conversations.get(CONVERSATION)
            last = await rt.core.repos.messages.last_id(CONVERSATION)
            assert conversation is not None and conversation.memory_upto_message_id == last
