"""TelegramChannel: python-telegram-bot long polling <-> InboundMessage/OutboundMessage (SPEC S10, S13, S14)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from telegram import BotCommand, Message, MessageEntity, ReplyParameters, Update
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError
from telegram.ext import (
    Application,
    ApplicationBuilder,
    ContextTypes,
    MessageHandler,
    filters,
)
from telegram.warnings import PTBDeprecationWarning

from bot.commands import COMMANDS
from bot.config import TelegramConfig
from bot.errors import MateError
from bot.prompts import PromptLibrary
from channels.base import ChannelCapabilities, InboundMessage, OutboundMessage
from channels.formatting import (
    TELEGRAM_LIMIT,
    markdown_to_telegram_html,
    split_message,
    utf16_len,
)

if TYPE_CHECKING:
    from bot.router import RoutedReply

log = logging.getLogger(__name__)

Handler = Callable[[InboundMessage], Awaitable["RoutedReply | None"]]

# Markdown is split well below the limit: the HTML rendering must still fit after conversion.
MARKDOWN_CHUNK = 3500
MIN_CHUNK = 256
TYPING_INTERVAL = 4.0
SEND_ATTEMPTS = 3
NETWORK_BACKOFF = 0.5
CONCURRENT_UPDATES = 64
_CHATS = (ChatType.PRIVATE, ChatType.GROUP, ChatType.SUPERGROUP)


class TelegramChannel:
    """Long-polls the Bot API, hands text messages to the router and sends its replies back."""

    name = "telegram"
    capabilities = ChannelCapabilities(max_message_length=TELEGRAM_LIMIT, rich_text=True, typing=True)

    def __init__(
        self, config: TelegramConfig, handler: Handler, prompts: PromptLibrary, *,
        application: Application[Any, Any, Any, Any, Any, Any] | None = None, poll_timeout: float = 30.0,
    ) -> None:
        self._config = config
        self._handler = handler
        self._prompts = prompts
        self._poll_timeout = poll_timeout
        self._app = application if application is not None else build_application(config)
        self._app.add_handler(MessageHandler(filters.UpdateType.MESSAGE, self._on_message))
        self._app.add_error_handler(self._on_error)
        self._stopping = asyncio.Event()
        self._finished = asyncio.Event()
        self._finished.set()
        self._username = ""

    # -- lifecycle --------------------------------------------------------------------

    async def run(self) -> None:
        """Poll until stop(); a start failure raises a MateError that never holds the token."""
        if self._stopping.is_set():
            return
        self._finished.clear()
        try:
            try:
                await self._start()
            except TelegramError as exc:
                raise MateError(f"telegram channel could not start: {self._describe(exc)}") from None
            log.info("telegram channel polling as @%s", self._username)
            await self._stopping.wait()
        finally:
            await self._close()
            self._finished.set()

    async def start(self) -> None:
        """The Channel port's start: polling happens in run(), which the daemon supervises."""

    async def stop(self) -> None:
        """Stop polling; in-flight replies are finished and sent before this returns."""
        self._stopping.set()
        await self._finished.wait()

    async def _start(self) -> None:
        app = self._app
        await app.initialize()
        self._username = app.bot.username or ""
        try:
            await app.bot.set_my_commands([BotCommand(name, text) for name, text in COMMANDS])
        except TelegramError as exc:  # the bot still works without its command menu
            log.warning("telegram setMyCommands failed: %s", self._describe(exc))
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(
            timeout=dtm.timedelta(seconds=self._poll_timeout), drop_pending_updates=False,
            allowed_updates=[Update.MESSAGE], error_callback=self._on_polling_error,
        )

    async def _close(self) -> None:
        app = self._app
        steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = []
        if app.updater is not None and app.updater.running:
            steps.append(("updater", app.updater.stop))
        if app.running:
            steps.append(("application", app.stop))
        steps.append(("shutdown", self._shutdown_app))
        for step, call in steps:
            try:
                await call()
            except Exception as exc:  # keep closing the rest
                log.warning("telegram %s stop failed: %s", step, self._describe(exc))

    async def _shutdown_app(self) -> None:
        app = self._app
        if app._initialized:  # noqa: SLF001 - PTB offers no public flag
            await app.shutdown()
        else:  # a failed initialize() leaves the HTTP clients of the bot open
            await app.bot.request.shutdown()
            await app.bot._request[0].shutdown()  # noqa: SLF001 - the getUpdates client

    # -- inbound ----------------------------------------------------------------------

    async def _on_message(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        if message is None:
            return
        try:
            await self._dispatch(message)
        except Exception as exc:  # one bad update must never stop polling
            if isinstance(exc, TelegramError):
                log.error("telegram update failed: %s", self._describe(exc),
                          extra={"channel": self.name, "chat_id": str(message.chat.id)})
            else:
                log.exception("telegram update failed", extra={"channel": self.name,
                                                              "chat_id": str(message.chat.id)})

    async def _dispatch(self, message: Message) -> None:
        user, chat = message.from_user, message.chat
        if user is None or user.is_bot or chat.type not in _CHATS:
            return
        is_direct = chat.type == ChatType.PRIVATE
        if not is_direct and self._command_for_other_bot(message):
            return
        topic = message.message_thread_id if message.is_topic_message else None
        thread_id = str(topic) if topic else None  # forum topics are separate conversations
        chat_id = str(chat.id)
        mentioned = self._mentions_bot(message)
        reply_to = None if is_direct else message.message_id
        if message.text is None:
            answer = self._media_answer(is_direct, str(user.id), mentioned, chat_id)
            if answer:
                await self._deliver(OutboundMessage(self.name, chat_id, answer, thread_id), reply_to, html=False)
            return
        inbound = InboundMessage(
            channel=self.name, chat_id=chat_id, sender_id=str(user.id), sender_name=user.full_name,
            text=message.text, is_direct=is_direct, mentions_bot=mentioned, thread_id=thread_id,
            chat_title=chat.title or "", is_admin=str(user.id) in self._config.admins,
        )
        # Typing only where an answer is expected: group chatter the router ignores shows nothing.
        async with self._typing_while(chat_id, thread_id, active=is_direct or mentioned):
            reply = await self._handler(inbound)
        if reply is not None and reply.text.strip():
            await self._deliver(OutboundMessage(self.name, chat_id, reply.text, thread_id), reply_to)

    def _mentions_bot(self, message: Message) -> bool:
        """@username, a text mention of the bot, a reply to the bot, or a command for it."""
        bot_id, username = self._app.bot.id, self._username.lower()
        entities = {**message.parse_entities(), **message.parse_caption_entities()}
        for entity, text in entities.items():
            if entity.type == MessageEntity.MENTION and username and text.lower() == f"@{username}":
                return True
            if entity.type == MessageEntity.TEXT_MENTION and entity.user is not None and entity.user.id == bot_id:
                return True
            if entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
                return True
        replied = message.reply_to_message
        return (replied is not None and replied.from_user is not None and replied.from_user.id == bot_id
                and replied.forum_topic_created is None)

    def _command_for_other_bot(self, message: Message) -> bool:
        """"/new@other_bot" in a group is meant for another bot."""
        text = message.text or ""
        if not text.startswith("/"):
            return False
        command = text.split(maxsplit=1)[0]
        target = command.partition("@")[2].lower()
        return bool(target) and target != self._username.lower()

    def _media_answer(self, is_direct: bool, sender_id: str, mentioned: bool, chat_id: str) -> str | None:
        """The polite "text only" answer to stickers, photos, voice... where the bot would answer."""
        config = self._config
        allowed = sender_id in config.admins or sender_id in config.allowed_users
        if is_direct:
            if config.dm_policy == "allowlist" and not allowed:
                return self._prompts.text("not_allowed", user_id=sender_id)
            return self._prompts.text("text_only")
        policy = config.group_policy
        if not mentioned or policy == "disabled" or (policy == "allowlist" and chat_id not in config.allowed_groups):
            return None
        return self._prompts.text("text_only")

    # -- outbound ---------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        """Send a reply as HTML chunks, each falling back to plain text if Telegram rejects it."""
        await self._deliver(message, None)

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        try:
            await self._app.bot.send_chat_action(_chat(chat_id), ChatAction.TYPING,
                                                 message_thread_id=_thread(thread_id))
        except TelegramError as exc:
            log.debug("telegram typing failed: %s", self._describe(exc))

    async def _deliver(self, message: OutboundMessage, reply_to: int | None, *, html: bool = True) -> None:
        if html:
            chunks = render_chunks(message.text)
        else:
            chunks = [(chunk, None) for chunk in split_message(message.text, TELEGRAM_LIMIT, length=utf16_len)]
        for markdown, rendered in chunks:
            kwargs: dict[str, Any] = {"chat_id": _chat(message.chat_id),
                                      "message_thread_id": _thread(message.thread_id)}
            if reply_to is not None:
                kwargs["reply_parameters"] = ReplyParameters(reply_to, allow_sending_without_reply=True)
                reply_to = None  # only the first chunk quotes the question
            if rendered is not None:
                try:
                    await self._with_retries(lambda: self._app.bot.send_message(
                        text=rendered, parse_mode=ParseMode.HTML, **kwargs))
                    continue
                except BadRequest as exc:
                    if "entit" not in str(exc).lower():
                        self._log_dropped(message, exc)
                        continue
                    log.info("telegram rejected our HTML (%s); sending plain text", self._describe(exc))
                except TelegramError as exc:
                    self._log_dropped(message, exc)
                    continue
            try:
                await self._with_retries(lambda: self._app.bot.send_message(text=markdown, **kwargs))
            except TelegramError as exc:
                self._log_dropped(message, exc)

    async def _with_retries(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """429: wait as told; network errors and timeouts: short backoff; SEND_ATTEMPTS tries."""
        for attempt in range(1, SEND_ATTEMPTS + 1):
            try:
                return await call()
            except RetryAfter as exc:
                if attempt == SEND_ATTEMPTS:
                    raise
                await asyncio.sleep(retry_seconds(exc))
            except BadRequest:
                raise  # a NetworkError subclass, but never transient
            except NetworkError:  # includes TimedOut and 5xx answers
                if attempt == SEND_ATTEMPTS:
                    raise
                await asyncio.sleep(NETWORK_BACKOFF * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    @contextlib.asynccontextmanager
    async def _typing_while(self, chat_id: str, thread_id: str | None, *, active: bool) -> AsyncIterator[None]:
        if not active:
            yield
            return

        async def keep_typing() -> None:
            while True:
                await self.typing(chat_id, thread_id)
                await asyncio.sleep(TYPING_INTERVAL)

        task = asyncio.create_task(keep_typing(), name=f"telegram-typing-{chat_id}")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- errors -----------------------------------------------------------------------

    def _on_polling_error(self, exc: TelegramError) -> None:
        log.warning("telegram polling error: %s", self._describe(exc))

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("telegram handler error: %s", self._describe(context.error))

    def _log_dropped(self, message: OutboundMessage, exc: BaseException) -> None:
        log.error("telegram message chunk dropped: %s", self._describe(exc),
                  extra={"channel": self.name, "chat_id": message.chat_id})

    def _describe(self, exc: BaseException | None) -> str:
        """Type and message of an error with the bot token (or its secret half) blanked out."""
        if exc is None:
            return "unknown error"
        text = f"{type(exc).__name__}: {exc}"
        token = self._config.token
        for secret in (token, token.partition(":")[2]):
            if secret:
                text = text.replace(secret, "<token>")
        return text


def build_application(config: TelegramConfig) -> Application[Any, Any, Any, Any, Any, Any]:
    """The PTB Application for a config: concurrent updates, no job queue, optional own server."""
    if not config.token:
        raise MateError("channels.telegram.token is empty")
    builder = ApplicationBuilder().token(config.token).concurrent_updates(CONCURRENT_UPDATES).job_queue(None)
    if config.base_url:
        base = config.base_url.rstrip("/")
        if not base.endswith("/bot"):
            base += "/bot"  # PTB appends the token right after it
        builder = builder.base_url(base).base_file_url(base[: -len("/bot")] + "/file/bot")
    return builder.build()


def render_chunks(text: str, limit: int = MARKDOWN_CHUNK) -> list[tuple[str, str | None]]:
    """(markdown, html) pairs that each fit Telegram's limit; html None when only plain text fits."""
    out: list[tuple[str, str | None]] = []
    for chunk in split_message(text, limit, length=utf16_len):
        rendered = markdown_to_telegram_html(chunk)
        if not rendered.strip():
            out.append((chunk, None))
        elif utf16_len(rendered) <= TELEGRAM_LIMIT:
            out.append((chunk, rendered))
        elif limit // 2 >= MIN_CHUNK:  # heavy escaping: split this piece finer
            out.extend(render_chunks(chunk, limit // 2))
        else:
            out.append((chunk, None))
    return out


def retry_seconds(exc: RetryAfter) -> float:
    """retry_after as seconds, whichever type PTB_TIMEDELTA makes PTB return."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


def _chat(chat_id: str) -> int | str:
    return int(chat_id) if chat_id.lstrip("-").isdigit() else chat_id


def _thread(thread_id: str | None) -> int | None:
    return int(thread_id) if thread_id else None
