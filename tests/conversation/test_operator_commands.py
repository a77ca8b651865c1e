"""What /status and /help tell the owner: the model's provider or offline mode, the commands of this channel."""

from __future__ import annotations

from pathlib import Path

from bot.app.runtime import open_runtime
from channels.base import InboundMessage
from tests.support.config import make_config


async def ask(tmp_path: Path, text: str, channel: str = "console", **llm: object) -> str:
    config = make_config(tmp_path, llm=llm or {"provider": "offline"})
    async with open_runtime(config, with_memory_worker=False) as rt:
        reply = await rt.router.handle(InboundMessage(channel, "me", "me", "me", text, is_admin=True))
    assert reply is not None
    return reply.text


async def test_status_says_when_there_is_no_model(tmp_path: Path) -> None:
    assert "offline mode" in (await ask(tmp_path, "/status")).splitlines()[0]


async def test_status_names_the_server_without_its_credentials(tmp_path: Path) -> None:
    for url in ("http://bob:hunter2pass@127.0.0.1:9/v1", "http://127.0.0.1:9/v1?api_key=hunter2pass",
                "http://127.0.0.1:9/k/hunter2pass/anthropic", "http://user:p@hunter2pass@127.0.0.1:9"):
        first = (await ask(tmp_path, "/status", base_url=url)).splitlines()[0]
        assert "the server at http://127.0.0.1:9" in first and "hunter2pass" not in first


async def test_help_lists_quit_only_on_the_console(tmp_path: Path) -> None:
    console = await ask(tmp_path, "/help")
    web = await ask(tmp_path, "/help", channel="web")
    assert "/quit" in console and "/quit" not in web
    assert "/memory search" in console
