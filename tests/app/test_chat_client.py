"""`matebot chat` beside a running daemon talks to it through the streaming chat route."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from bot.app.cli.chat_client import attach, daemon_running
from bot.app.instance_lock import DatabaseLock
from tests.support.config import make_config
from tests.support.api_env import open_api


async def test_the_console_attaches_to_the_running_daemon(tmp_path: Path) -> None:
    async for api in open_api(tmp_path, token="s3cret-token-for-chat"):
        port = int(api.url.rsplit(":", 1)[1])
        config = make_config(tmp_path, api={"port": port, "token": "s3cret-token-for-chat"})
        api.fake.reply_text("Hello from the daemon.")
        api.fake.reply_text("Still the same conversation.")
        reader = asyncio.StreamReader()
        reader.feed_data("hi there\nand again\n/quit\n".encode())
        out = io.StringIO()
        assert await attach(config, 1, reader=reader, output=out) == 0
        conversations = {r.conversation.id for r in await api.rt.core.repos.conversations.recent_activity()}

    printed = out.getvalue()
    assert "Hello from the daemon.\n" in printed and printed.count("Hello from the daemon.") == 1
    assert "Still the same conversation." in printed
    assert len(conversations) == 1  # the second message continued the first one's conversation


async def test_a_wrong_token_is_reported_not_crashed(tmp_path: Path) -> None:
    async for api in open_api(tmp_path, token="the-right-token-123"):
        port = int(api.url.rsplit(":", 1)[1])
        config = make_config(tmp_path, api={"port": port, "token": "a-wrong-token-456"})
        reader = asyncio.StreamReader()
        reader.feed_data(b"hi\n")
        reader.feed_eof()
        out = io.StringIO()
        assert await attach(config, 1, reader=reader, output=out) == 0
    assert "refused: HTTP 401" in out.getvalue()


def test_a_held_database_lock_means_a_daemon_runs(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    assert not daemon_running(config)
    with DatabaseLock(config.mate.database.path):
        assert daemon_running(config)
