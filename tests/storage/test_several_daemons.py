"""Two daemons on one PostgreSQL database and one Telegram bot: one polls, the other stands by and
takes over when the first stops; every message is answered once (python-telegram-bot on the fake
Bot API, which ends a long poll with 409 when another one starts, as Telegram does)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest

from bot.app.runtime import Runtime
from bot.storage.leases import Leases
from channels.base import CHANNEL_OK, CHANNEL_STANDBY
from channels.telegram.adapter import TelegramChannel
from tests.support.eventually import eventually
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.telegram import FakeTelegram
from tests.support.postgres import Cluster
from tests.support.runtime import running, telegram_channel
from tests.support.storage_backends import fresh_database

OWNER = 42


@asynccontextmanager
async def daemon(folder: Path, url: str, llm: FakeAnthropic, tg: FakeTelegram
                 ) -> AsyncIterator[tuple[Runtime, TelegramChannel]]:
    async with AsyncExitStack() as stack:
        rt = await stack.enter_async_context(running(
            folder, llm, storage={"url": url},
            channels={"telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url,
                                   "admins": [str(OWNER)]}}))
        assert rt.leases is not None and rt.leases.holder.endswith(str(folder.resolve()))
        # The daemon's own leases, with a lease's life in seconds rather than a minute.
        quick = Leases(rt.core.repos.leases, rt.leases.holder, seconds=2.0, renew_every=0.3)
        channel, _ = await stack.enter_async_context(telegram_channel(rt, leases=quick, backoff_base=0.05,
                                                                      backoff_max=0.2))
        yield rt, channel


async def test_one_daemon_polls_the_other_takes_over_and_each_message_is_answered_once(
        tmp_path: Path, postgres_cluster: Cluster | str) -> None:
    if isinstance(postgres_cluster, str):
        pytest.skip(f"PostgreSQL: {postgres_cluster}")
    async with FakeAnthropic(default_text="noted") as llm, FakeTelegram() as tg, \
            fresh_database(postgres_cluster) as url:
        async with daemon(tmp_path / "b", url, llm, tg) as (_, second):
            async with daemon(tmp_path / "a", url, llm, tg) as (_, first):
                await eventually(lambda: {first.state, second.state} == {CHANNEL_OK, CHANNEL_STANDBY},
                                 "one daemon polling, the other standing by")
                for n in range(5):
                    tg.push_text(f"message {n}", user_id=OWNER, chat_id=OWNER)
                await tg.wait_for_sent(5)
            # The first daemon stopped (its lease given back): the second polls now.
            await eventually(lambda: second.state == CHANNEL_OK, "the second daemon polling", timeout=20)
            for n in range(5, 10):
                tg.push_text(f"message {n}", user_id=OWNER, chat_id=OWNER)
            await tg.wait_for_sent(10)
            await eventually(lambda: len(llm.messages_requests()) >= 10, "ten answers made")
        answered = Counter(str(request["messages"][-1]["content"]) for request in llm.messages_requests())
        assert len(tg.sent) == 10
        assert sum(1 for text in answered if "message " in text) == 10
        assert all(count == 1 for count in answered.values()), answered


async def test_a_new_conversation_started_on_one_daemon_is_the_one_the_other_answers_in(
        tmp_path: Path, postgres_cluster: Cluster | str) -> None:
    from tests.support.runtime import chat

    if isinstance(postgres_cluster, str):
        pytest.skip(f"PostgreSQL: {postgres_cluster}")
    async with FakeAnthropic(default_text="noted") as llm, fresh_database(postgres_cluster) as url, \
            running(tmp_path / "a", llm, storage={"url": url}) as a, running(tmp_path / "b", llm, storage={"url": url}) as b:
        await chat(b, "hello from before")
        await chat(a, "/new")
        await chat(b, "which conversation am I in?")
        rows = await a.core.db.fetchall(
            "SELECT c.id, c.archived, count(m.id) AS messages FROM mate_conversation c LEFT JOIN mate_message m "
            "ON m.conversation_id = c.id GROUP BY c.id, c.archived ORDER BY c.id")
        assert [(r["id"], r["archived"], r["messages"]) for r in rows] == [
            ("console:me", 1, 2), ("console:me#2", 0, 2)]


async def test_a_database_that_fails_gets_the_person_an_apology_not_silence(
        tmp_path: Path, postgres_cluster: Cluster | str) -> None:
    import asyncpg

    from bot.core.errors import StorageError
    from channels.base import InboundMessage

    if isinstance(postgres_cluster, str):
        pytest.skip(f"PostgreSQL: {postgres_cluster}")
    async with FakeAnthropic(default_text="noted") as llm, fresh_database(postgres_cluster) as url, \
            running(tmp_path, llm, storage={"url": url}) as rt:
        stored: list[bool] = []
        name = url.rsplit("/", 1)[1]
        admin = await asyncpg.connect(postgres_cluster.url("postgres"))
        try:  # the database takes no connections and drops the open ones (a restart, a failover)
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
            reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", "hello there"),
                                           stored=lambda: stored.append(True))
            assert reply is not None and reply.text == rt.core.prompts.text("storage_error")
            assert llm.messages_requests() == []
            with pytest.raises(StorageError):
                await rt.core.db.fetchall("SELECT 1")
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            await admin.close()
        assert await rt.core.db.fetchall("SELECT 1")  # back once the database is
