"""Telegram's webhook mode (mate.channels.telegram.webhook): the bot registers its address and secret
token, updates are posted to the daemon, a post without the token is refused, a message posted twice
is answered once (python-telegram-bot on the fake Bot API; posts made as Telegram makes them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.core.errors import ConfigError
from channels.base import CHANNEL_OK
from channels.telegram.webhook import SECRET_HEADER
from tests.support.config import make_config
from tests.support.eventually import eventually
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.telegram import FakeTelegram
from tests.support.runtime import running, telegram_channel

SECRET = "s3cret_Token-1"
OWNER = 42


async def _post(port: int, update: Any, secret: str | None = SECRET, path: str = "/hook") -> int:
    headers = {SECRET_HEADER: secret} if secret is not None else {}
    async with aiohttp.ClientSession() as session, session.post(
            f"http://127.0.0.1:{port}{path}", json=update, headers=headers) as response:
        return response.status


async def test_posted_updates_are_answered_once_and_only_with_the_secret_token(tmp_path: Path) -> None:
    async with FakeAnthropic(default_text="hello from the webhook") as llm, FakeTelegram() as tg:
        webhook = {"url": "https://bot.example.org/hook", "listen": "127.0.0.1", "port": 0, "secret-token": SECRET}
        async with running(tmp_path, llm, channels={"telegram": {
                "enabled": True, "token": tg.token, "base-url": tg.base_url, "admins": [str(OWNER)],
                "webhook": webhook}}) as rt, telegram_channel(rt) as (channel, _):
            await eventually(lambda: channel.webhook_port > 0 and channel.state == CHANNEL_OK, "the webhook listening")
            assert tg.webhook is not None and tg.webhook["url"] == "https://bot.example.org/hook"
            assert tg.webhook["secret_token"] == SECRET
            assert not any(method == "getUpdates" for method, _ in tg.calls)  # no polling beside it

            update = tg.push_text("hi there", chat_id=OWNER, user_id=OWNER)
            assert await _post(channel.webhook_port, update, secret=None) == 401
            assert await _post(channel.webhook_port, update, secret="wrong") == 401
            assert llm.messages_requests() == []

            assert await _post(channel.webhook_port, update) == 200
            sent = await tg.wait_for_sent(1)
            assert sent[0]["text"] == "hello from the webhook"
            # Telegram posts again what it got no answer for: answered once all the same.
            assert await _post(channel.webhook_port, update) == 200
            assert await _post(channel.webhook_port, {"not": "an update"}) == 200
            assert await _post(channel.webhook_port, "garbage") == 200
            later = tg.push_text("and again", chat_id=OWNER, user_id=OWNER)
            assert await _post(channel.webhook_port, later) == 200
            await tg.wait_for_sent(2)
            assert len(llm.messages_requests()) == 2 and len(tg.sent) == 2


@pytest.mark.parametrize(("webhook", "problem"), [
    ({"url": "http://bot.example.org/hook", "secret-token": SECRET}, "https://"),
    ({"url": "https://bot.example.org/hook"}, "secret-token"),
    ({"url": "https://bot.example.org/hook", "secret-token": "has spaces"}, "secret-token"),
])
def test_a_webhook_needs_https_and_a_secret_token(tmp_path: Path, webhook: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        make_config(tmp_path, channels={"telegram": {"webhook": webhook}})
    message = str(refused.value)
    assert "mate.channels.telegram.webhook" in message and problem in message and "\n" not in message
