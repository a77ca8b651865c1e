"""The daemon as `matebot run` builds it: every enabled service wired, stopped in order."""

from __future__ import annotations

import asyncio
import gc
import logging
import warnings
from pathlib import Path

import pytest

from bot.app.daemon import run_daemon
from bot.app.runtime import Runtime
from bot.app.services import Services
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.telegram import FakeTelegram


async def test_daemon_serves_telegram_and_discord_together_then_stops_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from tests.support.fakes.discord import FakeDiscord
    async with FakeAnthropic() as fake, FakeTelegram() as tg, FakeDiscord() as dc:
        fake.reply_text("hello from the model")
        config = make_config(
            tmp_path,
            llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
            api={"port": 0},
            channels={
                "telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url,
                             "allowed-users": ["42"]},
                "discord": {"enabled": True, "token": "discord-token", "api-base-url": dc.api_base,
                            "gateway-url": dc.gateway_url, "allowed-users": ["42"]},
                "console": {"enabled": False},
            },
        )
        stop = asyncio.Event()
        started: list[Services] = []
        frozen: list[int] = []
        thresholds = gc.get_threshold()

        def ready(rt: Runtime, services: Services) -> None:
            started.append(services)
            frozen.append(gc.get_freeze_count())
            frozen.append(gc.get_threshold()[0])

        gc.unfreeze()
        daemon = asyncio.create_task(run_daemon(config, stop=stop, console=False, ready=ready))
        try:
            await dc.wait_ready(timeout=30)
            tg.push_text("hi bot", chat_id=42, user_id=42)
            (sent,) = await tg.wait_for_sent(1, timeout=30)
            assert sent["text"] == "hello from the model"
            fake.reply_text("hello discord")
            await dc.send_dm("hi there", author_id="42")
            (posted,) = await dc.wait_sent(1, timeout=10)
            assert posted["content"] == "hello discord"
            services = started[0]
            assert services.timer.runs_system_tasks and services.api is not None and services.api.port > 0
            assert frozen[0] > 10_000  # what start-up built is out of the full GC passes
            assert frozen[1] == 20_000  # and young collections come less often
        finally:
            stop.set()
            assert await asyncio.wait_for(daemon, 30) == 0
            gc.set_threshold(*thresholds)  # the rest of the test session keeps the defaults
        # Stopping the channels released the fakes' sessions; the database was closed last.
        assert tg.calls_of("setMyCommands")


async def test_a_stopped_channel_is_reported_while_the_others_keep_working(tmp_path: Path) -> None:
    import aiohttp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from tests.support.fakes.discord import FakeDiscord
    async with FakeAnthropic() as fake, FakeTelegram() as tg, FakeDiscord() as dc:
        tg.reject_token()
        config = make_config(
            tmp_path,
            llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
            api={"port": 0},
            channels={
                "telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url, "allowed-users": ["42"]},
                "discord": {"enabled": True, "token": "discord-token", "api-base-url": dc.api_base,
                            "gateway-url": dc.gateway_url, "allowed-users": ["42"]},
                "console": {"enabled": False},
            },
        )
        stop = asyncio.Event()
        started: list[Services] = []
        daemon = asyncio.create_task(run_daemon(config, stop=stop, console=False,
                                                ready=lambda rt, services: started.append(services)))
        try:
            await dc.wait_ready(timeout=30)
            api = started[0].api
            assert api is not None
            url = f"http://127.0.0.1:{api.port}/healthz"
            async with aiohttp.ClientSession() as http:
                for _ in range(100):  # Discord reports ok a moment after its READY
                    async with http.get(url) as response:
                        health = await response.json()
                    if health["data"]["channels"].get("discord") == "ok":
                        break
                    await asyncio.sleep(0.05)
            assert response.status == 200
            assert health["data"] == {"status": "degraded",
                                      "channels": {"telegram": "stopped: invalid token", "discord": "ok"}}
            await dc.send_dm("/status", author_id="42")
            (posted,) = await dc.wait_sent(1, timeout=10)
            assert "telegram: stopped: invalid token" in posted["content"]
            assert "discord: ok" in posted["content"]
        finally:
            stop.set()
            assert await asyncio.wait_for(daemon, 30) == 0


@pytest.mark.parametrize(("api", "locale", "named"), [
    ("openai", "en", "(OPENAI_API_KEY)"),
    ("anthropic", "en", "(ANTHROPIC_API_KEY)"),
    ("auto", "en", "(ANTHROPIC_API_KEY or OPENAI_API_KEY)"),
    ("auto", "zh-CN", "（ANTHROPIC_API_KEY 或 OPENAI_API_KEY）"),
])
async def test_offline_mode_names_the_key_of_the_chosen_protocol(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, api: str, locale: str, named: str,
) -> None:
    config = make_config(tmp_path, locale=locale, llm={"api": api}, api={"enabled": False},
                         channels={"console": {"enabled": False}})  # no key in the environment
    stop = asyncio.Event()
    caplog.set_level(logging.WARNING, logger="bot.app.daemon")
    assert await asyncio.wait_for(run_daemon(config, stop=stop, console=False,
                                             ready=lambda rt, services: stop.set()), 30) == 0
    (notice,) = [r.getMessage() for r in caplog.records if r.name == "bot.app.daemon" and "API" in r.getMessage()]
    assert named in notice  # the whole parenthesis: no other key named
