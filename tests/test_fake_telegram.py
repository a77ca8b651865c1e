"""Checks that the fake Bot API server works against the real python-telegram-bot client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from telegram import BotCommand, Update
from telegram.error import BadRequest, NetworkError, RetryAfter
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from tests.fakes.telegram import FakeTelegram


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    # httpx honours proxy variables, which would route 127.0.0.1 away from the fake.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    # RetryAfter.__init__ reads .retry_after, which warns (an error here) unless opted in.
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    async with FakeTelegram() as tg:
        yield tg


@pytest.fixture
async def app(fake: FakeTelegram) -> AsyncIterator[Application]:
    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.text is not None
        await update.message.reply_text(f"echo: {update.message.text}")

    async def start(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None
        await update.message.reply_text("started")

    application = (
        ApplicationBuilder()
        .token(fake.token)
        .base_url(fake.base_url)
        .base_file_url(fake.base_file_url)
        .build()
    )
    application.add_handler(CommandHandler("start", start))
    application.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, echo))
    await application.initialize()
    await application.start()
    assert application.updater is not None
    await application.updater.start_polling(poll_interval=0, timeout=1)
    yield application
    await application.updater.stop()
    await application.stop()
    await application.shutdown()


async def test_echo_roundtrip(fake: FakeTelegram, app: Application) -> None:
    assert app.bot.username == "mate_bot"
    fake.push_text("hello there", chat_id=42)
    [sent] = await fake.wait_for_sent()
    assert sent["chat_id"] == 42
    assert sent["text"] == "echo: hello there"
    assert fake.calls_of("getMe")
    assert fake.calls_of("deleteWebhook")


async def test_command_handler_fires(fake: FakeTelegram, app: Application) -> None:
    fake.push_text("/start")
    [sent] = await fake.wait_for_sent()
    assert sent["text"] == "started"


async def test_group_topic_reply_carries_thread_and_quote(
    fake: FakeTelegram, app: Application
) -> None:
    update = fake.push_text(
        "hi @mate_bot",
        chat_id=-100,
        chat_type="supergroup",
        message_thread_id=7,
        is_topic_message=True,
    )
    [sent] = await fake.wait_for_sent()
    assert sent["chat_id"] == -100
    assert sent["message_thread_id"] == 7
    # PTB quotes by default outside private chats.
    assert sent["reply_to_message_id"] == update["message"]["message_id"]
    assert update["message"]["entities"] == [{"type": "mention", "offset": 3, "length": 9}]


async def test_updates_are_confirmed_once(fake: FakeTelegram, app: Application) -> None:
    fake.push_sticker()
    fake.push_text("one")
    fake.push_text("two")
    sent = await fake.wait_for_sent(2)
    assert [s["text"] for s in sent] == ["echo: one", "echo: two"]


async def test_scripted_failures(fake: FakeTelegram, app: Application) -> None:
    fake.fail_next(
        "sendMessage",
        error_code=429,
        description="Too Many Requests: retry after 1",
        retry_after=1,
    )
    fake.fail_next(
        "sendMessage", error_code=400, description="Bad Request: can't parse entities: x"
    )
    with pytest.raises(RetryAfter):
        await app.bot.send_message(42, "a")
    with pytest.raises(BadRequest, match="Can't parse entities"):
        await app.bot.send_message(42, "*b", parse_mode="MarkdownV2")
    message = await app.bot.send_message(42, "c")
    assert message.text == "c" and message.from_user is not None
    assert [s["text"] for s in fake.sent] == ["c"]
    assert len(fake.calls_of("sendMessage")) == 3


async def test_retry_after_zero_is_rejected(fake: FakeTelegram) -> None:
    with pytest.raises(ValueError, match="retry_after"):
        fake.fail_next("sendMessage", error_code=429, description="x", retry_after=0)


async def test_429_without_retry_after_is_network_error(
    fake: FakeTelegram, app: Application
) -> None:
    fake.fail_next("sendMessage", error_code=429, description="Too Many Requests")
    with pytest.raises(NetworkError):
        await app.bot.send_message(42, "a")


async def test_commands_edits_and_fallbacks(fake: FakeTelegram, app: Application) -> None:
    await app.bot.set_my_commands([BotCommand("start", "Begin"), BotCommand("help", "Help")])
    [params] = fake.calls_of("setMyCommands")
    assert params["commands"] == [
        {"command": "start", "description": "Begin"},
        {"command": "help", "description": "Help"},
    ]
    assert [c.command for c in await app.bot.get_my_commands()] == ["start", "help"]

    assert await app.bot.send_chat_action(42, "typing") is True
    message = await app.bot.send_message(42, "draft")
    edited = await app.bot.edit_message_text("final", chat_id=42, message_id=message.message_id)
    assert not isinstance(edited, bool) and edited.text == "final"

    document = await app.bot.send_document(42, document=b"data", filename="a.txt", caption="doc")
    assert document.caption == "doc"
    [upload] = fake.calls_of("sendDocument")
    assert upload["document"]["data"] == b"data"
    assert await app.bot.set_message_reaction(42, message.message_id) is True
    assert fake.calls_of("setMessageReaction")


async def test_json_body_and_bad_token(fake: FakeTelegram) -> None:
    async with aiohttp.ClientSession() as session:
        url = f"{fake.base_url}{fake.token}/sendMessage"
        async with session.post(url, json={"chat_id": 5, "text": "42"}) as resp:
            body = await resp.json()
        assert body["ok"] and body["result"]["chat"]["id"] == 5
        async with session.post(f"{fake.base_url}0:bad/getMe") as resp:
            assert resp.status == 401
    assert fake.sent == [{"chat_id": 5, "text": "42"}]
