"""Checks that the fake Bot API server works against the real python-telegram-bot client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from telegram import Bot, BotCommand, MessageEntity, Update
from telegram.error import BadRequest, NetworkError, RetryAfter
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from tests.support.fakes.telegram import FakeTelegram


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
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(fake.token, base_url=fake.base_url, base_file_url=fake.base_file_url) as client:
        yield client


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


async def test_send_message_parses_html_into_text_and_entities(fake: FakeTelegram, bot: Bot) -> None:
    html = 'Hi <b>Alice</b> &amp; 😀 <a href="https://x.test">co</a>'
    message = await bot.send_message(42, html, parse_mode="HTML")
    assert message.text == "Hi Alice & 😀 co"
    assert [(e.type, e.offset, e.length) for e in message.entities] == [("bold", 3, 5), ("text_link", 14, 2)]
    assert message.parse_entity(message.entities[1]) == "co"
    [(_, method, chat_id, text)] = fake.visible
    assert (method, chat_id, text) == ("sendMessage", 42, "Hi Alice & 😀 co")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<b>open", "(?i)can't find end tag"),
        ("<b><i>x</b></i>", "(?i)unmatched end tag"),
        ("<blink>x</blink>", "(?i)unsupported start tag"),
        ("<b> </b>", "Message text is empty"),
        ("x" * 4097, "Message is too long"),
    ],
)
# PTB capitalizes BadRequest messages: "Message_too_long", "Can't parse entities: unsupported ...".
async def test_send_message_rejects_what_telegram_rejects(
    fake: FakeTelegram, bot: Bot, text: str, error: str
) -> None:
    with pytest.raises(BadRequest, match=error):
        await bot.send_message(42, text, parse_mode="HTML")
    assert fake.sent == [] and fake.visible == []


async def test_draft_in_private_chat_is_recorded_and_visible(fake: FakeTelegram, bot: Bot) -> None:
    assert await bot.send_message_draft(42, 7, "thinking <b>hard</b>", parse_mode="HTML") is True
    [draft] = fake.drafts
    assert (draft["chat_id"], draft["draft_id"], draft["text"]) == (42, 7, "thinking <b>hard</b>")
    assert await fake.wait_for_call("sendMessageDraft") == draft
    [(_, method, chat_id, text)] = fake.visible
    assert (method, chat_id, text) == ("sendMessageDraft", 42, "thinking hard")


async def test_empty_draft_is_a_placeholder_not_visible_text(fake: FakeTelegram, bot: Bot) -> None:
    # Bot API 10.0 (PTB 22.8): an empty draft shows "Thinking...".
    assert await bot.send_message_draft(42, 1) is True
    assert len(fake.drafts) == 1 and fake.visible == []


@pytest.mark.parametrize("chat_type", ["group", "supergroup", None])
async def test_draft_outside_private_chats_is_rejected(
    fake: FakeTelegram, bot: Bot, chat_type: str | None
) -> None:
    if chat_type is not None:
        fake.push_text("hi", chat_id=-100, chat_type=chat_type)  # the fake now knows the chat
    with pytest.raises(BadRequest, match="only for private chats"):
        await bot.send_message_draft(-100, 1, "partial")
    assert fake.drafts == [] and fake.visible == []


@pytest.mark.parametrize(
    ("draft_id", "text", "error"),
    [(0, "partial", "Draft_id must be a non-zero integer"), (1, "x" * 4097, "Message is too long")],
)
async def test_draft_limits(fake: FakeTelegram, bot: Bot, draft_id: int, text: str, error: str) -> None:
    with pytest.raises(BadRequest, match=error):
        await bot.send_message_draft(42, draft_id, text)
    assert fake.drafts == []


async def test_successful_edit_changes_the_stored_text(fake: FakeTelegram, bot: Bot) -> None:
    message = await bot.send_message(42, "draft")
    mid = message.message_id
    edited = await bot.edit_message_text("<i>final</i>", chat_id=42, message_id=mid, parse_mode="HTML")
    assert not isinstance(edited, bool)
    assert (edited.message_id, edited.text) == (message.message_id, "final")
    assert edited.edit_date is not None
    assert [(e.type, e.offset, e.length) for e in edited.entities] == [("italic", 0, 5)]
    [edit] = fake.edits
    assert (edit["message_id"], edit["text"]) == (message.message_id, "<i>final</i>")
    assert [(m, text) for _, m, _, text in fake.visible] == [
        ("sendMessage", "draft"),
        ("editMessageText", "final"),
    ]
    with pytest.raises(BadRequest, match="not modified"):  # the stored text is now "final"
        await bot.edit_message_text("<em>final</em>", chat_id=42, message_id=mid, parse_mode="HTML")


async def test_edit_to_the_same_content_is_not_modified(fake: FakeTelegram, bot: Bot) -> None:
    message = await bot.send_message(42, "<b>same</b>", parse_mode="HTML")
    bold = [MessageEntity(MessageEntity.BOLD, 0, 4)]
    for kwargs in ({"parse_mode": "HTML"}, {"entities": bold}):
        text = "<b>same</b>" if kwargs.get("parse_mode") else "same"
        with pytest.raises(BadRequest) as caught:
            await bot.edit_message_text(text, chat_id=42, message_id=message.message_id, **kwargs)
        assert "message is not modified" in str(caught.value).lower()
    assert fake.edits == []
    # The same characters without the bold entity are new content.
    edited = await bot.edit_message_text("same", chat_id=42, message_id=message.message_id)
    assert not isinstance(edited, bool) and edited.entities == ()
    assert len(fake.edits) == 1


async def test_edit_of_a_message_the_bot_did_not_send_is_rejected(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match="Message to edit not found"):
        await bot.edit_message_text("x", chat_id=42, message_id=999)
    incoming = fake.push_text("mine", chat_id=42)["message"]
    with pytest.raises(BadRequest, match="Message can't be edited"):
        await bot.edit_message_text("x", chat_id=42, message_id=incoming["message_id"])
    sent = await bot.send_message(42, "in chat 42")
    with pytest.raises(BadRequest, match="Message to edit not found"):
        await bot.edit_message_text("x", chat_id=43, message_id=sent.message_id)
    assert fake.edits == [] and [m for _, m, _, _ in fake.visible] == ["sendMessage"]


@pytest.mark.parametrize(("text", "error"), [("", "Message text is empty"), ("x" * 4097, "Message_too_long")])
async def test_edit_text_limits(fake: FakeTelegram, bot: Bot, text: str, error: str) -> None:
    message = await bot.send_message(42, "draft")
    with pytest.raises(BadRequest, match=error):
        await bot.edit_message_text(text, chat_id=42, message_id=message.message_id)
    assert fake.edits == []


async def test_wait_for_visible_returns_the_first_match(fake: FakeTelegram, bot: Bot) -> None:
    waiter = asyncio.create_task(fake.wait_for_visible(lambda entry: entry[1] == "sendMessage"))
    await bot.send_message_draft(42, 3, "partial")
    await bot.send_message(42, "whole")
    await bot.send_message(42, "second")
    received, method, chat_id, text = await waiter
    assert (method, chat_id, text) == ("sendMessage", 42, "whole")
    assert fake.visible[0][0] <= received <= fake.visible[2][0]
    with pytest.raises(AssertionError, match="no matching visible text"):
        await fake.wait_for_visible(lambda entry: entry[3] == "never", timeout=0.05)
