"""Channels on a network that fails: late start, outages, rejected tokens, a second poller (SPEC S20).

The real python-telegram-bot and discord.py clients run against the fakes, which refuse
connections while "down", cut open ones when the network drops, and answer 401 / 409 / 4014.
"""

from __future__ import annotations

import asyncio
import logging
import re
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bot.app.runtime import open_runtime
from channels.base import CHANNEL_OK, CHANNEL_RETRYING
from channels.discord.adapter import DiscordChannel
from channels.telegram.adapter import STOPPED_CONFLICT
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.telegram import FakeTelegram
from tests.support.telegram_env import ADMIN, running

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from tests.support.fakes.discord import FakeDiscord
from tests.support.discord_env import ALLOWED
from tests.support.runtime import fast_client


async def _until(predicate: object, timeout: float = 5.0) -> float:
    """Seconds until predicate() holds (fails after `timeout`)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not predicate():  # type: ignore[operator]
        assert loop.time() - start < timeout, "condition not met in time"
        await asyncio.sleep(0.01)
    return loop.time() - start


def _retry_lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(logger) and r.levelno >= logging.WARNING]


def _retry_numbers(lines: list[logging.LogRecord]) -> list[int]:
    """The N of each "retry N in ..." line: 1, 2, 3... when every retry logs exactly one line."""
    return [int(m.group(1)) for r in lines if (m := re.search(r"retry (\d+) in", r.getMessage()))]


async def test_telegram_down_at_start_recovers_when_the_server_comes_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with running(tmp_path, tg=FakeTelegram(serving=False)) as env:
        # Several failed attempts (backoff 0.05 doubling to 0.2 s), however slowly they come.
        await _until(lambda: len(_retry_lines(caplog, "channels.telegram")) >= 2)
        assert env.channel.state == CHANNEL_RETRYING
        env.llm.reply_text("back online")
        env.tg.push_text("are you there?", chat_id=ADMIN, user_id=ADMIN)
        await env.tg.serve()
        [sent] = await env.tg.wait_for_sent(timeout=30)
        assert sent["text"] == "back online" and env.channel.state == CHANNEL_OK
    lines = _retry_lines(caplog, "channels.telegram")
    assert len(lines) >= 2 and _retry_numbers(lines) == list(range(1, len(lines) + 1))  # one line per retry
    assert all("unreachable" in r.getMessage() for r in lines)
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in lines)  # no tracebacks


async def test_telegram_network_drop_mid_poll_is_retried_on_a_fresh_client(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with running(tmp_path) as env:
        env.llm.reply_text("first")
        env.tg.push_text("one", chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(1)
        await env.tg.drop_network()
        await _until(lambda: env.channel.state == CHANNEL_RETRYING)
        env.tg.push_text("two", chat_id=ADMIN, user_id=ADMIN)  # waits on the server meanwhile
        env.llm.reply_text("second")
        # The poll that broke, then at least one fresh client refused while the network is down.
        await _until(lambda: len(_retry_lines(caplog, "channels.telegram")) >= 2)
        await env.tg.restore_network()
        recovered = await _until(lambda: len(env.tg.sent) >= 2)
        assert [s["text"] for s in env.tg.sent] == ["first", "second"]
        assert recovered < 2.0  # backoff_max is 0.2 s here; 60 s in the daemon
        assert len(env.llm_requests()) == 2  # each message answered exactly once


async def test_telegram_conflict_stops_the_channel_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    tg = FakeTelegram()
    tg.polling_conflict = True
    async with running(tmp_path, tg=tg) as env:
        await asyncio.wait_for(env.task, timeout=30)  # run() returns by itself
        assert env.channel.state == STOPPED_CONFLICT
        polls = len(env.tg.calls_of("getUpdates"))
    assert polls == 1  # no retry loop against the other poller
    errors = [r for r in _retry_lines(caplog, "channels.telegram") if "409" in r.getMessage()
              or "another" in r.getMessage()]
    assert len(errors) == 1 and errors[0].exc_info is None


@asynccontextmanager
async def discord_channel(tmp_path: Path, dc: FakeDiscord) -> AsyncIterator[tuple[DiscordChannel, FakeAnthropic,
                                                                               asyncio.Task[None]]]:
    async with FakeAnthropic() as fa:
        config = make_config(
            tmp_path,
            llm={"provider": "anthropic", "api-key": "test-key", "base-url": fa.url, "max-retries": 0},
            channels={"discord": {"enabled": True, "token": "TOKEN", "allowed-users": [ALLOWED],
                                  "api-base-url": dc.api_base, "gateway-url": dc.gateway_url}},
        )
        async with open_runtime(config) as rt:
            channel = DiscordChannel(config.mate.channels.discord, rt.router.handle, rt.core.prompts,
                                     client_factory=fast_client, backoff_base=0.05, backoff_max=0.2)
            task = asyncio.create_task(channel.run())
            try:
                yield channel, fa, task
            finally:
                await channel.stop()
                await asyncio.wait_for(task, 5)


async def test_discord_down_at_start_recovers_with_few_log_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with FakeDiscord(listening=False) as dc, discord_channel(tmp_path, dc) as (channel, fa, _):
        await _until(lambda: len(_retry_lines(caplog, "channels.discord")) >= 2)  # several failed attempts
        assert channel.state == CHANNEL_RETRYING
        await dc.start_listening()
        recovered = await _until(lambda: channel.state == CHANNEL_OK)
        assert recovered < 2.0
        fa.reply_text("hello again")
        await dc.send_dm("hi", author_id=ALLOWED)
        (posted,) = await dc.wait_sent(1, timeout=5)
        assert posted["content"] == "hello again"
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    lines = _retry_lines(caplog, "channels.discord")
    assert len(lines) >= 2 and _retry_numbers(lines) == list(range(1, len(lines) + 1))  # one line per retry
    assert all(r.exc_info is None for r in records)  # not a chain of tracebacks


async def test_discord_network_drop_reconnects(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with FakeDiscord() as dc, discord_channel(tmp_path, dc) as (channel, fa, _):
        await _until(lambda: channel.state == CHANNEL_OK)
        await dc.drop_network()
        await _until(lambda: channel.state == CHANNEL_RETRYING)
        # At least one fresh client refused while the network is down.
        await _until(lambda: len(_retry_lines(caplog, "channels.discord")) >= 1)
        await dc.restore_network()
        await _until(lambda: channel.state == CHANNEL_OK)
        fa.reply_text("still here")
        await dc.send_dm("ping", author_id=ALLOWED)
        (posted,) = await dc.wait_sent(1, timeout=5)
        assert posted["content"] == "still here"


@pytest.mark.parametrize("fault, state", [
    ("reject_token", "stopped: invalid token"),
    ("refuse_intents", "stopped: message content intent not enabled"),
])
async def test_discord_faults_no_retry_can_fix_stop_the_channel(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fault: str, state: str,
) -> None:
    caplog.set_level(logging.INFO)
    async with FakeDiscord() as dc:
        setattr(dc, fault, True)
        async with discord_channel(tmp_path, dc) as (channel, _, task):
            await asyncio.wait_for(asyncio.shield(task), 5)  # run() returns by itself
            assert channel.state == state
    lines = [r for r in caplog.records if r.name.startswith("channels.discord") and r.levelno >= logging.WARNING]
    assert len(lines) == 1 and lines[0].exc_info is None


async def test_an_update_fetched_but_not_stored_at_stop_is_delivered_again(tmp_path: Path) -> None:
    from channels.telegram.adapter import TelegramChannel

    entered = asyncio.Event()

    def closing(rt: object) -> object:
        async def handle(message: object, *, stored: object = None, stream: object = None) -> None:
            entered.set()  # as the router does once intake stopped: not stored, `stored` not called
        return handle

    async with running(tmp_path, handler=closing) as env:  # type: ignore[arg-type]
        env.tg.push_text("do not lose me", chat_id=ADMIN, user_id=ADMIN)
        await asyncio.wait_for(entered.wait(), 5)
        await env.channel.stop()
        await asyncio.wait_for(env.task, 5)
        handed = env.tg.handed_out[-1][0] if env.tg.handed_out[-1] else env.tg.handed_out[0][0]
        assert env.tg.confirmed_below <= handed  # Telegram still holds it
        env.llm.reply_text("got it")
        again = TelegramChannel(env.config.mate.channels.telegram, env.rt.router.handle, env.rt.core.prompts,
                                poll_timeout=0.2, backoff_base=0.05, backoff_max=0.2)
        task = asyncio.create_task(again.run())
        try:
            [sent] = await env.tg.wait_for_sent(timeout=30)
            assert sent["text"] == "got it"
        finally:
            await again.stop()
            await asyncio.wait_for(task, 5)


def test_backoff_doubles_to_the_cap_with_jitter_below_it() -> None:
    from bot.core.retry import Backoff

    backoff = Backoff(1.0, 60.0, jitter=0.2)
    assert [backoff.delay(n, rand=lambda: 0.0) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff.delay(10, rand=lambda: 1.0) == pytest.approx(48.0)
