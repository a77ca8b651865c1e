"""TelegramChannel: Bot API long polling <-> InboundMessage/OutboundMessage (SPEC S10, S13, S14, S20)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from telegram import Bot, BotCommand, Message, ReplyParameters, Update
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import BadRequest, Conflict, InvalidToken, NetworkError, RetryAfter, TelegramError

from bot.conversation.access import AccessPolicy, is_addressed
from bot.conversation.commands.names import COMMANDS
from bot.core.config import TelegramConfig
from bot.core.prompts import PromptLibrary
from bot.core.retry import CHANNEL_RECONNECT, TELEGRAM_SEND, Backoff, RetryStreak, retrying
from channels.base import (
    CHANNEL_OK,
    CHANNEL_RETRYING,
    CHANNEL_STANDBY,
    InboundMessage,
    MessageHandler,
    OutboundMessage,
    PollingLeases,
    Stored,
    channel_stopped,
)
from channels.formatting import (
    TELEGRAM_LIMIT,
    split_message,
    utf16_len,
)
from channels.telegram.addressing import command_for_other_bot, mentions_bot
from channels.telegram.bot import PollingBot, build_bot, close_bot, render_chunks, require_token, retry_seconds
from channels.telegram.errors import blank, describe, log_dropped, log_retry, send_retryable, told_wait
from channels.telegram.files import files_of
from channels.telegram.polling import UpdateLedger, read_updates, skip_unreadable
from channels.telegram.webhook import WebhookReceiver
from channels.telegram.stream import TelegramReplyPreview, chat_ref, thread_ref

log = logging.getLogger(__name__)

T = TypeVar("T")
BotFactory = Callable[[], PollingBot]

TYPING_INTERVAL = 4.0
CONCURRENT_UPDATES = 64
# How long the first picture of an album waits for the others (they arrive within a second).
ALBUM_WAIT = 1.0
BUSY_POLL_INTERVAL = 0.5  # how often to re-poll while only unstored updates come back
CONFIRM_TIMEOUT = 5.0
ALLOWED_UPDATES = [Update.MESSAGE]
_CHATS = (ChatType.PRIVATE, ChatType.GROUP, ChatType.SUPERGROUP)

STOPPED_INVALID_TOKEN = channel_stopped("invalid token")
WEBHOOK_STORE_WAIT = 50.0  # seconds a posted update may take to be stored; else Telegram posts it again
STOPPED_CONFLICT = channel_stopped("another instance is polling this bot (409 Conflict)")
STOPPED_SHUT_DOWN = channel_stopped("shut down")
STOPPED = channel_stopped("")


class _Stopping(Exception):
    """stop() was called while the channel waited on the network."""


class TelegramChannel:
    """Long-polls the Bot API, hands text messages to the router and sends its replies back.

    run() owns the connection: every attempt builds a fresh Bot from the factory (a failed
    initialize() leaves PTB's request objects unusable), network failures are retried with
    backoff, an invalid token or a 409 Conflict stops the channel. The adapter polls
    getUpdates itself so an update is confirmed only once the router has stored it.
    """

    name = "telegram"

    def __init__(
        self, config: TelegramConfig, handler: MessageHandler, prompts: PromptLibrary, *,
        bot_factory: BotFactory | None = None, poll_timeout: float = 30.0,
        backoff_base: float = CHANNEL_RECONNECT.base, backoff_max: float = CHANNEL_RECONNECT.maximum,
        backoff_jitter: float = CHANNEL_RECONNECT.jitter,
        busy_poll_interval: float = BUSY_POLL_INTERVAL, concurrent_updates: int = CONCURRENT_UPDATES,
        access: AccessPolicy | None = None, leases: PollingLeases | None = None,
    ) -> None:
        if bot_factory is None:
            require_token(config)
        self._config = config
        self._access = access or AccessPolicy.telegram(config)
        self._handler = handler
        self._prompts = prompts
        self._bot_factory = bot_factory or (lambda: build_bot(config))
        self._poll_timeout = poll_timeout
        self._backoff = Backoff(backoff_base, backoff_max, jitter=backoff_jitter)
        self._busy_poll_interval = busy_poll_interval
        self._slots = asyncio.Semaphore(concurrent_updates)
        self._ledger = UpdateLedger()
        self._tasks: set[asyncio.Task[None]] = set()
        # Albums being collected: (chat, media group) -> its messages with their update ids.
        self._albums: dict[tuple[int, str], list[tuple[Message, int]]] = {}
        self._bot: PollingBot | None = None  # the connected bot replies go through
        self._retired: list[PollingBot] = []  # earlier bots, closed once no update task may use them
        self._bot_id = 0
        self._username = ""
        self._commands_set = False
        self._polled_since_connect = False
        self._state = CHANNEL_RETRYING  # not reachable until the first connection succeeds
        self._stopping = asyncio.Event()
        self._finished = asyncio.Event()
        self._finished.set()
        # Several daemons on one database: the one holding the lease "telegram:<bot id>" polls,
        # the others stand by (their replies and reminders still go out through the bot).
        self._leases = leases
        self._standby_noted = False
        self.webhook_port = 0  # webhook mode: the port updates are posted to, once listening

    @property
    def state(self) -> str:
        """"ok" while polling works, "retrying" while it backs off, "stopped: <reason>" after a stop."""
        return self._state

    # -- lifecycle --------------------------------------------------------------------

    async def run(self) -> None:
        """Poll until stop() or a fatal answer (invalid token, 409); network failures are retried."""
        if self._stopping.is_set():
            return
        self._finished.clear()
        confirm = True
        try:
            confirm = await (self._serve_webhook() if self._config.webhook.url else self._connect_and_poll())
        finally:
            await self._close(confirm=confirm)
            self._finished.set()

    async def stop(self) -> None:
        """Stop polling; in-flight replies are finished and sent before this returns.

        Updates fetched but not yet stored are left unconfirmed: Telegram delivers them again.
        """
        self._stopping.set()
        await self._finished.wait()
        if not self._state.startswith(STOPPED):
            self._state = STOPPED_SHUT_DOWN  # stopped before run() began

    async def _connect_and_poll(self) -> bool:
        """Retry until stopped; False after a fatal stop (no final confirmation is sent)."""
        retries, down_since = RetryStreak(self._backoff), time.monotonic()
        while True:
            bot = self._bot_factory()
            adopted = False
            try:
                await self._unless_stopped(self._connect(bot))
                self._adopt(bot)
                adopted = True
                if retries.retries == 0 and not self._standby_noted:
                    log.info("telegram channel polling as @%s", self._username)
                elif retries.retries:
                    log.info("telegram channel polling as @%s again, after %.1f s of retries",
                             self._username, time.monotonic() - down_since)
                await self._close_retired()
                # Standing by keeps this bot (replies, reminders) and asks for the lease at each renewal.
                while not await self._poll_leased(bot):
                    await self._close_retired()
                    if not await self._sleep(self._leases.renew_every if self._leases else 0):
                        return True
            except _Stopping:
                return True
            except InvalidToken as exc:
                return self._token_rejected(exc)
            except Conflict:
                if self._leases is not None:  # another daemon polls: it holds the lease, or took it over
                    self._state = CHANNEL_STANDBY
                    if not await self._sleep(self._leases.renew_every):
                        return True
                    continue
                log.error("telegram channel stopped: another instance is polling this bot (409 Conflict); "
                          "stop the other one, then restart matebot")
                self._state = STOPPED_CONFLICT
                return False
            except Exception as exc:  # network down, timeouts, 5xx, odd answers: retry on a fresh bot
                if self._polled_since_connect:  # it worked until now: a new outage starts
                    retries.reset()
                    down_since = time.monotonic()
                    self._polled_since_connect = False
                delay = retries.next()
                self._state = CHANNEL_RETRYING
                log_retry(exc, retries.retries, delay, self._config.token)
                if not await self._sleep(delay):
                    return True
            finally:
                if not adopted:
                    await close_bot(bot)

    def _token_rejected(self, exc: InvalidToken) -> bool:
        """The channel stops for good, one line saying why; False: no offset to confirm."""
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        log.error("telegram channel stopped: the Bot API rejected the bot token (%s); "
                  "check channels.telegram.token", blank(str(cause), self._config.token))
        self._state = STOPPED_INVALID_TOKEN
        return False

    async def _serve_webhook(self) -> bool:
        """Take the updates Telegram posts (webhook mode) until stop(); False: no offset to confirm."""
        retries = RetryStreak(self._backoff)
        webhook = self._config.webhook
        while True:
            bot = self._bot_factory()
            try:
                await self._unless_stopped(bot.initialize())
                await self._unless_stopped(bot.set_webhook(webhook.url, secret_token=webhook.secret_token,
                                                           allowed_updates=ALLOWED_UPDATES))
                break
            except _Stopping:
                await close_bot(bot)
                return False
            except InvalidToken as exc:
                await close_bot(bot)
                return self._token_rejected(exc)
            except Exception as exc:  # network down, odd answers: again on a fresh bot
                await close_bot(bot)
                delay = retries.next()
                self._state = CHANNEL_RETRYING
                log_retry(exc, retries.retries, delay, self._config.token)
                if not await self._sleep(delay):
                    return False
        self._adopt(bot)
        receiver = WebhookReceiver(webhook, self._accept_posted)
        await receiver.start()
        self.webhook_port = receiver.port
        try:
            await self._stopping.wait()
        finally:
            await receiver.stop()
        return False

    async def _accept_posted(self, entry: Any) -> bool:
        """A posted update handled as a polled one is; True once it is stored (or needs no storing)."""
        bot = self._bot
        if bot is None or self._stopping.is_set():
            return False
        batch = read_updates([entry], bot)
        if not batch.updates:
            return True  # unreadable, or without an update id: posting it again changes nothing
        update_id = batch.updates[0].update_id
        if self._ledger.is_new(update_id):  # else posted again while the first post is in hand
            self._ledger.fetched(update_id)
            self._spawn(batch.updates[0])
        try:
            stored = await self._unless_stopped(self._ledger.until_done(update_id, WEBHOOK_STORE_WAIT))
        except _Stopping:
            stored = False
        self._ledger.forget(update_id)  # a post again is a new post; the router answers once
        return stored

    async def _connect(self, bot: Bot) -> None:
        await bot.initialize()  # getMe: an invalid token raises InvalidToken here
        await bot.delete_webhook(drop_pending_updates=False)  # getUpdates answers 409 while a webhook is set
        if not self._commands_set:
            try:
                await bot.set_my_commands([BotCommand(name, text) for name, text in COMMANDS])
                self._commands_set = True
            except TelegramError as exc:  # the bot still works without its command menu
                log.warning("telegram setMyCommands failed: %s", describe(exc, self._config.token))

    def _adopt(self, bot: PollingBot) -> None:
        if self._bot is not None:
            self._retired.append(self._bot)
        self._bot, self._bot_id, self._username = bot, bot.id, bot.username or ""
        self._state = CHANNEL_OK

    async def _poll_leased(self, bot: PollingBot) -> bool:
        """Poll while this daemon holds the bot's lease; False at once when another daemon holds
        it (this one stands by), and when the lease is lost (polling stops after the current call)."""
        if self._leases is None:
            await self._poll(bot, None)
            return True
        lost = asyncio.Event()
        async with self._leases.held(f"telegram:{bot.id}", lost) as held:
            if not held:
                self._state = CHANNEL_STANDBY
                if not self._standby_noted:
                    self._standby_noted = True
                    log.info("telegram channel standing by: another matebot on this database polls @%s",
                             self._username)
                return False
            if self._standby_noted:
                log.info("telegram channel polling as @%s: taken over from another matebot", self._username)
                self._standby_noted = False
            await self._poll(bot, lost)
        return False

    async def _poll(self, bot: PollingBot, lost: asyncio.Event | None) -> None:
        """getUpdates until an error (or `lost` is set); the offset only confirms updates the router
        has stored (or that cannot be read: those are skipped, so they cannot hold up the rest)."""
        ledger = self._ledger
        while lost is None or not lost.is_set():
            ledger.progress.clear()
            offset = ledger.offset()
            try:
                entries = await self._unless_stopped(bot.get_update_dicts(
                    offset=offset, timeout=dtm.timedelta(seconds=self._poll_timeout),
                    allowed_updates=ALLOWED_UPDATES))
            except RetryAfter as exc:
                seconds = retry_seconds(exc)
                log.warning("telegram getUpdates rate-limited; polling again in %.0f s", seconds)
                if not await self._sleep(seconds):
                    raise _Stopping from None
                continue
            ledger.acknowledged(offset)
            self._polled_since_connect = True
            self._state = CHANNEL_OK
            batch = read_updates(entries, bot)
            skipped = skip_unreadable(batch, ledger)
            fresh = [update for update in batch.updates if ledger.is_new(update.update_id)]
            for update in fresh:
                ledger.fetched(update.update_id)
                self._spawn(update)
            await self._close_retired()
            if entries and not fresh and not skipped:
                # Telegram answers at once while older updates are still unstored: wait for
                # one to be stored (or a short while, for other chats' news) instead of spinning.
                await self._wait_for(ledger.progress, self._busy_poll_interval)

    async def _close_retired(self) -> None:
        """Earlier bots closed once no update task may still use them."""
        if self._retired and not self._tasks:
            for old in self._retired:
                await close_bot(old)
            self._retired.clear()

    async def _close(self, *, confirm: bool) -> None:
        await self._drain()
        bot = self._bot
        if confirm and bot is not None and self._ledger.unconfirmed:
            await self._confirm(bot)
        for old in [*self._retired, *([bot] if bot is not None else [])]:
            await close_bot(old)
        self._bot, self._retired = None, []
        if not self._state.startswith(STOPPED):
            self._state = STOPPED_SHUT_DOWN

    async def _confirm(self, bot: PollingBot) -> None:
        """One last getUpdates whose offset confirms what was stored since the previous one."""
        offset = self._ledger.offset()
        try:
            async with asyncio.timeout(CONFIRM_TIMEOUT):  # the answer is not read: unread updates come again
                await bot.get_update_dicts(offset=offset, timeout=dtm.timedelta(0), limit=1,
                                           allowed_updates=ALLOWED_UPDATES)
            self._ledger.acknowledged(offset)
        except Exception as exc:  # they are delivered again; the router answers each once
            log.warning("telegram could not confirm the last updates: %s", describe(exc, self._config.token))

    async def _drain(self) -> None:
        """Wait for every update task: in-flight replies are finished and sent."""
        if not self._tasks:
            return
        tasks = set(self._tasks)
        try:
            await asyncio.wait(tasks)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            raise

    async def _unless_stopped(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable`, cancelling it when stop() is called (then _Stopping is raised)."""
        if self._stopping.is_set():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise _Stopping
        work = asyncio.ensure_future(awaitable)
        stopper = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
        if work.cancelled():
            raise _Stopping
        return work.result()

    async def _sleep(self, seconds: float) -> bool:
        """Wait `seconds`; False when stop() was called meanwhile."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return True
        return False

    async def _wait_for(self, event: asyncio.Event, seconds: float) -> None:
        """Until `event` is set, stop() is called, or `seconds` pass."""
        waiters = {asyncio.create_task(event.wait()), asyncio.create_task(self._stopping.wait())}
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    # -- inbound ----------------------------------------------------------------------

    def _spawn(self, update: Update) -> None:
        task = asyncio.create_task(self._process(update), name=f"telegram-update-{update.update_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _process(self, update: Update) -> None:
        """Handle one update in its own task; mark it confirmable once stored or needing no storing."""
        update_id, message = update.update_id, update.message
        chat = str(message.chat.id) if message is not None else ""
        album: list[tuple[Message, int]] = [(message, update_id)] if message is not None else []
        try:
            if message is not None and message.media_group_id:
                # An album arrives as one message per picture: the first waits for the rest
                # and answers them together; the others are handed to it.
                key = (message.chat.id, message.media_group_id)
                if key in self._albums:
                    self._albums[key].append((message, update_id))
                    return
                self._albums[key] = album
                try:
                    if not await self._sleep(ALBUM_WAIT):
                        return  # stopping: left unconfirmed, Telegram delivers them again
                finally:
                    album = self._albums.pop(key, album)
            ids = [part_id for _, part_id in album]

            def confirm() -> None:
                for part_id in ids:
                    self._ledger.done(part_id)

            async with self._slots:
                if self._stopping.is_set():
                    return  # fetched, never handled: left unconfirmed, Telegram delivers it again
                handed_over = message is not None and await self._dispatch(
                    message, confirm, album=[part for part, _ in album[1:]])
            if not handed_over:
                confirm()
        except Exception as exc:  # one bad update must never stop polling, nor block confirmation
            for part_id in [part_id for _, part_id in album] or [update_id]:
                self._ledger.done(part_id)
            if isinstance(exc, TelegramError):
                log.error("telegram update %d failed: %s", update_id, describe(exc, self._config.token),
                          extra={"channel": self.name, "chat_id": chat})
            else:
                log.exception("telegram update %d failed", update_id, extra={"channel": self.name, "chat_id": chat})

    async def _dispatch(self, message: Message, stored: Stored, *, album: Sequence[Message] = ()) -> bool:
        """Answer one message (with the rest of its album); True when it went to the router,
        which then calls `stored` itself."""
        user, chat = message.from_user, message.chat
        if user is None or user.is_bot or chat.type not in _CHATS:
            return False
        is_direct = chat.type == ChatType.PRIVATE
        if not is_direct and command_for_other_bot(message, self._username):
            return False
        topic = message.message_thread_id if message.is_topic_message else None
        thread_id = str(topic) if topic else None  # forum topics are separate conversations
        chat_id = str(chat.id)
        reply_to = None if is_direct else message.message_id
        files = tuple(file for part in (message, *album) for file in files_of(part, self._fetcher))
        caption = next((part.caption for part in (message, *album) if part.caption), "")
        inbound = InboundMessage(
            channel=self.name, chat_id=chat_id, sender_id=str(user.id), sender_name=user.full_name,
            text=message.text if message.text is not None else caption, is_direct=is_direct,
            mentions_bot=mentions_bot(message, self._bot_id, self._username), thread_id=thread_id, chat_title=chat.title or "",
            is_admin=self._access.is_admin(str(user.id)), external_id=str(message.message_id), files=files,
            place_id=None if is_direct else chat_id,  # a Telegram group is its own place
        )
        if message.text is None and not files:
            answer = self._media_answer(inbound)
            if answer:
                await self._deliver(OutboundMessage(self.name, chat_id, answer, thread_id), reply_to, html=False)
            return False
        preview = TelegramReplyPreview(self._connected, self._with_retries, self._described, chat_id, thread_id,
                                       reply_to, draft_id=message.message_id if is_direct else None)
        # Typing only where an answer is expected: group chatter the router ignores shows nothing.
        reply = None
        async with self._typing_while(chat_id, thread_id, active=is_direct or is_addressed(inbound)):
            try:
                reply = await self._handler(inbound, stored=stored, stream=preview.stream)
            finally:
                await preview.stream.close()
                if reply is None or not reply.text.strip():
                    await preview.discard()
        if reply is not None and reply.text.strip():
            await self._deliver(OutboundMessage(self.name, chat_id, reply.text, thread_id), reply_to, preview=preview)
        return True

    def _fetcher(self, file_id: str) -> Callable[[], Awaitable[bytes]]:
        async def fetch() -> bytes:
            file = await self._with_retries(lambda: self._connected().get_file(file_id))
            return bytes(await self._with_retries(file.download_as_bytearray))

        return fetch

    def _media_answer(self, inbound: InboundMessage) -> str | None:
        """The polite "text only" answer to stickers, photos, voice... where the bot would answer."""
        decision = self._access.decide(self._access.access_of(inbound))
        if inbound.is_direct and decision.refuses:
            return decision.refusal_line(self._prompts)
        # In a group only a mention earns the notice, even where every message is answered,
        # and never the group's id line: a sticker is not a request.
        if decision.answers and (inbound.is_direct or is_addressed(inbound)):
            return self._prompts.text("text_only")
        return None

    # -- outbound ---------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        """Send a reply as HTML chunks, each falling back to plain text if Telegram rejects it."""
        await self._deliver(message, None)

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        try:
            await self._connected().send_chat_action(chat_ref(chat_id), ChatAction.TYPING,
                                                     message_thread_id=thread_ref(thread_id))
        except TelegramError as exc:
            log.debug("telegram typing failed: %s", describe(exc, self._config.token))

    async def _deliver(
        self, message: OutboundMessage, reply_to: int | None, *, html: bool = True,
        preview: TelegramReplyPreview | None = None,
    ) -> None:
        """Send `message` in chunks; the first one replaces the `preview`, when there is one."""
        if html:
            chunks = render_chunks(message.text)
        else:
            chunks = [(chunk, None) for chunk in split_message(message.text, TELEGRAM_LIMIT, length=utf16_len)]
        for markdown, rendered in chunks:
            if preview is not None:
                edited, preview = await preview.finish(markdown, rendered), None
                if edited:
                    reply_to = None
                    continue
            kwargs: dict[str, Any] = {"chat_id": chat_ref(message.chat_id),
                                      "message_thread_id": thread_ref(message.thread_id)}
            if reply_to is not None:
                kwargs["reply_parameters"] = ReplyParameters(reply_to, allow_sending_without_reply=True)
                reply_to = None  # only the first chunk quotes the question
            if rendered is not None:
                try:
                    await self._with_retries(lambda: self._connected().send_message(
                        text=rendered, parse_mode=ParseMode.HTML, **kwargs))
                    continue
                except BadRequest as exc:
                    if "entit" not in str(exc).lower():
                        log_dropped(message, exc, self._config.token)
                        continue
                    log.info("telegram rejected our HTML (%s); sending plain text", describe(exc, self._config.token))
                except TelegramError as exc:
                    log_dropped(message, exc, self._config.token)
                    continue
            try:
                await self._with_retries(lambda: self._connected().send_message(text=markdown, **kwargs))
            except TelegramError as exc:
                log_dropped(message, exc, self._config.token)

    def _connected(self) -> PollingBot:
        """The bot replies go through; between connections a NetworkError, retried like one."""
        if self._bot is None:
            raise NetworkError("the telegram channel is not connected")
        return self._bot

    async def _with_retries(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """429: wait as told; network errors and timeouts: short backoff; TELEGRAM_SEND's tries."""
        return await retrying(call, send_retryable, TELEGRAM_SEND, retry_after=told_wait)

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

    def _described(self, exc: BaseException | None) -> str:
        return describe(exc, self._config.token)
