"""DiscordChannel: a discord.py client turned into InboundMessages, replies and /memory app commands (SPEC S10, S20)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl
from discord import app_commands

from bot.conversation.access import AccessPolicy
from bot.core.config import DiscordConfig
from bot.core.prompts import PromptLibrary
from bot.core.retry import CHANNEL_RECONNECT, Backoff, RetryStreak
from channels.base import (
    CHANNEL_OK,
    CHANNEL_RETRYING,
    CHANNEL_STANDBY,
    PollingLeases,
    InboundMessage,
    MessageHandler,
    OutboundMessage,
    channel_stopped,
)
from channels.formatting import DISCORD_LIMIT, split_message
from channels.discord.replies import NO_PINGS, Preview, clean_text, file_of, keep_typing

log = logging.getLogger(__name__)

ClientFactory = Callable[..., discord.Client]

_CHAT_MESSAGES = (discord.MessageType.default, discord.MessageType.reply)

# Failures that mean "Discord cannot be reached right now": retried on a fresh client.
_NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    OSError, aiohttp.ClientError, asyncio.TimeoutError,
    discord.HTTPException, discord.GatewayNotFound, discord.ConnectionClosed,
)
# discord.py's loggers that report connection failures themselves, traceback included.
_SDK_LOGGERS = ("discord.client", "discord.gateway", "discord.http", "discord.shard")
_INTENT_HELP = ("the message content intent is not enabled for this bot: enable it in the Discord "
                "Developer Portal (Bot > Privileged Gateway Intents > Message Content Intent)")
# Gateway close codes that no retry can fix: (state reason, log line).
_FATAL_CLOSE_CODES = {
    4004: ("invalid token", "Discord rejected the bot token (channels.discord.token)"),
    4013: ("invalid intents", "Discord rejected the requested gateway intents"),
    4014: ("message content intent not enabled", _INTENT_HELP),
}


def _location(channel: Any, channel_id: int | None) -> tuple[str, str | None]:
    """(chat_id, thread_id): a thread is its own conversation under its parent channel."""
    if isinstance(channel, discord.Thread):
        return str(channel.parent_id), str(channel.id)
    return str(channel.id if channel is not None else channel_id), None


class _EndpointOverride:
    """Points discord.py at a REST proxy or fake; it only offers process-wide class attributes.

    `Route.BASE` and `DiscordWebSocket.DEFAULT_GATEWAY` are read when a request or the first
    websocket is made, so the values must stay set for the client's whole life; they are
    restored once the last channel that set them is done (two channels of one process, as in
    a test of two daemons, share them).
    """

    # discord.py's endpoints are per process, so is the count of channels that set them.
    _users: ClassVar[int] = 0
    _original: ClassVar[tuple[str, yarl.URL] | None] = None

    def __init__(self, api_base_url: str | None, gateway_url: str | None) -> None:
        self._base = api_base_url.rstrip("/") if api_base_url else None  # e.g. http://host/api/v10
        self._gateway = yarl.URL(gateway_url) if gateway_url else None
        self._applied = False

    def apply(self) -> None:
        if self._applied:
            return
        self._applied = True
        if _EndpointOverride._users == 0:
            _EndpointOverride._original = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
        _EndpointOverride._users += 1
        if self._base is not None:
            discord.http.Route.BASE = self._base
        if self._gateway is not None:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = self._gateway

    def restore(self) -> None:
        if not self._applied:
            return
        self._applied = False
        _EndpointOverride._users -= 1
        original = _EndpointOverride._original
        if _EndpointOverride._users or original is None:
            return
        # The last channel done: discord.py's own endpoints again, whichever channel set which.
        discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = original
        _EndpointOverride._original = None


class _Fatal(Exception):
    """A failure no retry can fix: the channel stops with one log line."""

    def __init__(self, reason: str, line: str) -> None:
        super().__init__(line)
        self.reason = reason  # for `state`: "stopped: <reason>"
        self.line = line


class _QuietConnectionErrors(logging.Filter):
    """Turns discord.py's own connection-failure records (ERROR with a traceback) into DEBUG ones.

    The adapter logs one line per retry itself; real errors (an event handler's bug, a 4xx
    answer discord.py reports) keep their level. Attached to the SDK's loggers only while
    a channel runs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if record.levelno <= logging.DEBUG or not isinstance(exc, _NETWORK_ERRORS):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def _no_confirmation() -> None:
    """Discord has no update to acknowledge: a gateway event is gone once it was dispatched."""


# The top-level commands without options, in the order Discord lists them: (name, description,
# what is asked, whether only the caller sees the answer).
_PLAIN_COMMANDS = (
    ("help", "Show the commands", "/help", False),
    ("new", "Start a fresh conversation", "/new", False),
    ("compact", "Summarise the conversation so far", "/compact", False),
    ("status", "Agent, model, context and memory status", "/status", False),
    ("whoami", "Who the bot takes you for, and which agent answers", "/whoami", True),
)


class DiscordChannel:
    """Embeds a discord.Client: `run()` in its own task, `stop()` closes it.

    run() keeps a fresh client per connection attempt: when Discord cannot be reached (at
    start-up or later) it waits `backoff_base` doubling to `backoff_max` seconds, with
    jitter, logs one line per retry and tries again until the network returns.
    """

    name = "discord"

    def __init__(
        self, config: DiscordConfig, handler: MessageHandler, prompts: PromptLibrary, *,
        client_factory: ClientFactory | None = None, backoff_base: float = CHANNEL_RECONNECT.base,
        backoff_max: float = CHANNEL_RECONNECT.maximum,
        rng: random.Random | None = None, access: AccessPolicy | None = None,
        leases: PollingLeases | None = None,
    ) -> None:
        self._config = config
        self._access = access or AccessPolicy.discord(config)
        self._handler = handler
        self._prompts = prompts
        self._factory: ClientFactory = client_factory or discord.Client  # called as factory(intents=...)
        self._endpoints = _EndpointOverride(config.api_base_url, config.gateway_url)
        policy = Backoff(backoff_base, backoff_max, jitter=CHANNEL_RECONNECT.jitter)
        self._backoff = RetryStreak(policy, (rng or random.Random()).random)
        self._client: discord.Client | None = None
        self._connected = False
        self._stopped_reason: str | None = None
        self._stopping = False
        self._stop_event = asyncio.Event()
        self._commands_synced = False  # once per channel, not on every reconnect
        # Several daemons on one database: the one holding the lease "discord:<bot id>" connects to
        # the gateway, the others stand by, logged in for sending only (replies, reminders).
        self._leases = leases
        self._standby = False
        self._handing_over = False
        self._handling = 0  # messages being answered on this client

    @property
    def client(self) -> discord.Client | None:
        """The current client (None before run(); a new one per connection attempt); for tests."""
        return self._client

    @property
    def state(self) -> str:
        """"ok" while connected and ready, "retrying" while (re)connecting, "stopped: <reason>" after."""
        if self._stopped_reason is not None:
            return channel_stopped(self._stopped_reason)
        if self._standby:
            return CHANNEL_STANDBY
        return CHANNEL_OK if self._connected else CHANNEL_RETRYING

    # -- lifecycle ----------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until stop(); network failures are retried with backoff on a fresh client, for ever.

        Returns normally after stop() and after a fatal error (a rejected token, the message
        content intent not enabled), which is logged in one line and leaves `state` stopped.
        """
        if self._stopping:  # stop() is final, even when it came before run() got going
            return
        if not self._config.token:
            self._stop_for(_Fatal("no token", "channels.discord.token is empty"))
            return
        quiet = _QuietConnectionErrors()
        for name in _SDK_LOGGERS:
            logging.getLogger(name).addFilter(quiet)
        self._endpoints.apply()
        try:
            while not self._stopping:
                try:
                    await self._connect_once()
                except _Fatal as fatal:
                    self._stop_for(fatal)
                    return
                except Exception as exc:
                    if self._stopping:
                        log.debug("discord client ended while stopping", exc_info=True)
                        return
                    await self._back_off(exc)
                else:
                    if not self._stopping:  # Discord closed the session cleanly (1000): reconnect
                        await self._back_off(None)
        finally:
            self._connected = False
            self._endpoints.restore()
            for name in _SDK_LOGGERS:
                logging.getLogger(name).removeFilter(quiet)

    async def stop(self) -> None:
        self._stopping = True
        self._stop_event.set()
        if self._stopped_reason is None:
            self._stopped_reason = "shut down"
        if self._client is not None:
            await self._client.close()
        self._endpoints.restore()

    async def _connect_once(self) -> None:
        """One client's life: log in, connect, serve until the connection is lost or stop()."""
        client = self._new_client()
        try:
            # reconnect=False: discord.py still RESUMEs after a plain gateway close, but a failed
            # connection attempt comes back here, to be retried with our backoff on a new client.
            if self._leases is None:
                await client.start(self._config.token, reconnect=False)
            else:
                await self._serve_leased(client, self._leases)
        except discord.LoginFailure:
            raise _Fatal("invalid token", "Discord rejected the bot token (HTTP 401); "
                                          "check channels.discord.token") from None
        except discord.PrivilegedIntentsRequired:
            raise _Fatal("message content intent not enabled", _INTENT_HELP) from None
        except discord.ConnectionClosed as exc:
            if exc.code in _FATAL_CLOSE_CODES:
                raise _Fatal(*_FATAL_CLOSE_CODES[exc.code]) from None
            raise
        finally:
            self._connected = False
            if not client.is_closed():
                await client.close()  # a failed login leaves the HTTP session open otherwise

    async def _serve_leased(self, client: discord.Client, leases: PollingLeases) -> None:
        """Log in (REST: sending works), then connect to the gateway while this daemon holds the bot's
        lease; stand by meanwhile. Returns when the gateway closes or the lease is lost."""
        await client.login(self._config.token)
        assert client.user is not None
        name = f"discord:{client.user.id}"
        while not self._stopping:
            lost = asyncio.Event()
            async with leases.held(name, lost) as held:
                if held:
                    if self._standby:
                        log.info("Discord: taken over from another matebot", extra={"channel": self.name})
                    self._standby = False
                    closer = asyncio.create_task(self._close_when(lost, client), name="discord-lease-lost")
                    try:
                        await client.connect(reconnect=False)
                    finally:
                        closer.cancel()
                    return
            if not self._standby:
                log.info("Discord standing by: another matebot on this database serves this bot",
                         extra={"channel": self.name})
            self._standby = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_event.wait(), leases.renew_every)

    async def _close_when(self, lost: asyncio.Event, client: discord.Client) -> None:
        """The lease lost: no new messages, the replies being written finished, then the gateway closed."""
        await lost.wait()
        log.warning("Discord: another matebot took this bot over; handing over", extra={"channel": self.name})
        self._handing_over = True
        try:
            for _ in range(600):  # at most a minute for the replies in hand
                if not self._handling:
                    break
                await asyncio.sleep(0.1)
            await client.close()
        finally:
            self._handing_over = False

    def _new_client(self) -> discord.Client:
        intents = discord.Intents.default()
        intents.message_content = True
        intents.dm_messages = True
        client = self._factory(intents=intents)
        tree = self._build_tree(client)
        self._client = client

        async def setup_hook() -> None:
            if self._commands_synced:
                return
            try:
                await tree.sync()  # global commands; Discord may take a while to show changes
                self._commands_synced = True
            except discord.HTTPException as exc:
                log.warning("could not register the Discord app commands: %s", exc,
                            exc_info=log.isEnabledFor(logging.DEBUG), extra={"channel": self.name})

        async def on_ready() -> None:
            if client is not self._client or client.is_closed():
                return
            self._connected = True
            if self._backoff.retries:
                log.info("Discord reachable again after %d retries", self._backoff.retries,
                         extra={"channel": self.name})
            else:
                log.info("connected to Discord as %s", client.user, extra={"channel": self.name})
            self._backoff.reset()

        async def on_resumed() -> None:
            if client is self._client and not client.is_closed():
                self._connected = True

        async def on_disconnect() -> None:
            if client is self._client:
                self._connected = False

        client.setup_hook = setup_hook  # type: ignore[method-assign]
        client.on_ready = on_ready  # type: ignore[attr-defined]
        client.on_resumed = on_resumed  # type: ignore[attr-defined]
        client.on_disconnect = on_disconnect  # type: ignore[attr-defined]
        client.on_message = self._on_message  # type: ignore[attr-defined]
        return client

    async def _back_off(self, exc: BaseException | None) -> None:
        """One log line, then wait (cut short by stop()) before the next attempt."""
        delay = self._backoff.next()
        extra = {"channel": self.name}
        if exc is None or isinstance(exc, _NETWORK_ERRORS):
            # The traceback of a network failure says nothing new: only at debug level.
            log.warning("cannot reach Discord (%s); retry %d in %.1f s", self._describe(exc),
                        self._backoff.retries, delay, exc_info=exc if log.isEnabledFor(logging.DEBUG) else None,
                        extra=extra)
        else:
            log.error("the Discord client failed (%s); retry %d in %.1f s", self._describe(exc),
                      self._backoff.retries, delay, exc_info=exc, extra=extra)
        try:
            await asyncio.wait_for(self._stop_event.wait(), delay)
        except TimeoutError:
            pass

    def _describe(self, exc: BaseException | None) -> str:
        if exc is None:
            return "connection closed"
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return text.replace(self._config.token, "***") if self._config.token else text

    def _stop_for(self, fatal: _Fatal) -> None:
        self._stopped_reason = fatal.reason
        self._connected = False
        log.error("Discord channel stopped: %s", fatal.line, extra={"channel": self.name})

    # -- outbound -----------------------------------------------------------------------

    def _messageable(self, chat_id: str, thread_id: str | None) -> discord.PartialMessageable:
        if self._client is None or self._client.is_closed():
            raise RuntimeError("the Discord channel is not running")
        return self._client.get_partial_messageable(int(thread_id or chat_id))

    async def place_of(self, chat_id: str) -> str | None:
        """The server a channel is in: None for a direct chat, or a channel this bot cannot see."""
        client = self._client
        if client is None or not (chat_id.isascii() and chat_id.isdigit()):
            return None
        channel: Any = client.get_channel(int(chat_id))
        if channel is None:
            try:
                channel = await client.fetch_channel(int(chat_id))
            except (discord.HTTPException, discord.InvalidData):
                return None
        guild = getattr(channel, "guild", None)
        return None if guild is None else str(guild.id)

    async def send(self, message: OutboundMessage) -> None:
        target = self._messageable(message.chat_id, message.thread_id)
        for chunk in split_message(message.text, DISCORD_LIMIT):
            await target.send(chunk, allowed_mentions=NO_PINGS)

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        await self._messageable(chat_id, thread_id).typing()

    # -- messages -----------------------------------------------------------------------

    async def _on_message(self, message: discord.Message) -> None:
        if self._handing_over:  # the lease is another daemon's now: it takes the new messages
            return
        self._handling += 1
        try:
            await self._handle_message(message)
        except Exception:  # one bad event must not end the client
            log.exception("discord message handling failed",
                          extra={"channel": self.name, "chat_id": str(message.channel.id)})
        finally:
            self._handling -= 1

    async def _handle_message(self, message: discord.Message) -> None:
        client = self._client
        me = client.user if client is not None else None
        if me is None or message.author.id == me.id or message.author.bot or message.type not in _CHAT_MESSAGES:
            return
        # An uncached guild gives message.guild None with a PartialMessageable: never take it for a DM.
        guild_id = message.guild.id if message.guild is not None else getattr(message.channel, "guild_id", None)
        inbound = self._inbound(message, me.id, guild_id)
        access = self._access.access_of(inbound)
        # The server is checked before the router: a server not allowed gets its line (or
        # silence) here, and a sticker's notice is sent here; the router decides the rest.
        place = self._access.decide_place(access)
        if not place.answers:
            if place.refuses:
                await message.channel.send(place.refusal_line(self._prompts), allowed_mentions=NO_PINGS)
            return
        if not inbound.text and not inbound.files:
            # A sticker where the bot would answer; a stranger's in a direct chat gets silence.
            if message.stickers and self._access.decide(access).answers:
                await message.channel.send(self._prompts.text("text_only"), allowed_mentions=NO_PINGS)
            return
        preview = Preview(message)
        reply = None
        try:
            if self._access.wants_answer(access):  # a typing indicator only where an answer is expected
                async with keep_typing(message.channel):
                    reply = await self._handler(inbound, stored=_no_confirmation, stream=preview.stream)
            else:
                # The router decides; it ignores such messages.
                reply = await self._handler(inbound, stored=_no_confirmation, stream=preview.stream)
        finally:
            await preview.stream.close()
            if reply is None or not reply.text.strip():
                await preview.discard()
        if reply is None or not reply.text.strip():
            return
        first, *rest = split_message(reply.text, DISCORD_LIMIT)
        if not await preview.replace(first):
            # Only the first part quotes the question; a deleted question must not lose the answer.
            await message.channel.send(first, reference=message.to_reference(fail_if_not_exists=False),
                                       allowed_mentions=NO_PINGS)
        for chunk in rest:
            await message.channel.send(chunk, allowed_mentions=NO_PINGS)

    def _inbound(self, message: discord.Message, bot_id: int, guild_id: int | None) -> InboundMessage:
        is_direct = guild_id is None
        channel = message.channel
        chat_id, thread_id = _location(channel, channel.id)
        mentioned = any(user.id == bot_id for user in message.mentions)
        own_thread = isinstance(channel, discord.Thread) and channel.owner_id == bot_id
        resolved = message.reference.resolved if message.reference is not None else None
        replied_to_bot = isinstance(resolved, discord.Message) and resolved.author.id == bot_id
        sender_id = str(message.author.id)
        if is_direct:
            title = ""
        elif isinstance(channel, (discord.TextChannel, discord.Thread)):
            title = f"{channel.guild.name} #{channel.name}"
        else:
            title = f"#{channel.id}"
        return InboundMessage(
            channel=self.name, chat_id=chat_id, thread_id=thread_id, sender_id=sender_id,
            sender_name=message.author.display_name, text=clean_text(message, bot_id),
            is_direct=is_direct, mentions_bot=mentioned or own_thread or replied_to_bot, chat_title=title,
            is_admin=self._access.is_admin(sender_id), external_id=str(message.id),
            files=tuple(file_of(a) for a in message.attachments),
            place_id=None if guild_id is None else str(guild_id),
        )

    # -- app commands -------------------------------------------------------------------

    def _build_tree(self, client: discord.Client) -> app_commands.CommandTree[discord.Client]:
        tree: app_commands.CommandTree[discord.Client] = app_commands.CommandTree(client)
        ask = self._on_command
        plain = self._plain_command
        for name, description, text, ephemeral in _PLAIN_COMMANDS:
            tree.add_command(plain(name, description, text, ephemeral=ephemeral))

        @tree.command(name="tasks", description="This chat's reminders and scheduled tasks")
        @app_commands.describe(cancel="The id of a task to cancel")
        async def tasks(interaction: discord.Interaction, cancel: int | None = None) -> None:
            await ask(interaction, "/tasks" if cancel is None else f"/tasks cancel {cancel}")

        memory = app_commands.Group(name="memory", description="Memory tools (show, history, why: yours, in a DM)")
        memory.add_command(plain("emerge", "Consolidate recent daily notes into MEMORY.md", "/memory emerge"))
        memory.add_command(plain("summarize", "Save this conversation to memory now", "/memory summarize"))

        @memory.command(name="show", description="Show a memory file (direct chat only)")
        @app_commands.describe(which="Which file: profile, memory (default) or today's note")
        async def show(
            interaction: discord.Interaction, which: Literal["profile", "memory", "today"] | None = None,
        ) -> None:
            # Memory holds personal data: only the caller sees the answer.
            await ask(interaction, f"/memory show {which}" if which else "/memory show", ephemeral=True)

        @memory.command(name="history", description="The latest memory changes and where they came from")
        @app_commands.describe(file="One file, e.g. PROFILE.md (default: all)")
        async def history(interaction: discord.Interaction, file: str | None = None) -> None:
            await ask(interaction, f"/memory history {file}" if file else "/memory history", ephemeral=True)

        @memory.command(name="why", description="When and from which conversation memory learned something")
        @app_commands.describe(text="Words that are in memory")
        async def why(interaction: discord.Interaction, text: str) -> None:
            await ask(interaction, f"/memory why {text}", ephemeral=True)

        memory.add_command(plain("approve", "Apply the proposed MEMORY.md change", "/memory approve"))
        memory.add_command(plain("reject", "Drop the proposed MEMORY.md change", "/memory reject"))
        tree.add_command(memory)
        tree.add_command(plain("undo", "Take back what memory kept from this chat's last exchange", "/undo"))

        @tree.command(name="incognito", description="Talk without anything being remembered")
        @app_commands.describe(state="on or off")
        async def incognito(interaction: discord.Interaction, state: Literal["on", "off"]) -> None:
            await ask(interaction, f"/incognito {state}")

        return tree

    def _plain_command(
        self, name: str, description: str, text: str, *, ephemeral: bool = False,
    ) -> app_commands.Command[Any, ..., None]:
        """A command without options: it asks `text` as a message would."""
        async def run(interaction: discord.Interaction) -> None:
            await self._on_command(interaction, text, ephemeral=ephemeral)

        return app_commands.Command(name=name, description=description, callback=run)

    async def _on_command(self, interaction: discord.Interaction, text: str, *, ephemeral: bool = False) -> None:
        guild_id = interaction.guild_id
        user = interaction.user
        chat_id, thread_id = _location(interaction.channel, interaction.channel_id)
        inbound = InboundMessage(
            channel=self.name, chat_id=chat_id, thread_id=thread_id, sender_id=str(user.id),
            sender_name=user.display_name, text=text, is_direct=guild_id is None, mentions_bot=True,
            is_admin=self._access.is_admin(str(user.id)), external_id=str(interaction.id),
            place_id=None if guild_id is None else str(guild_id),
        )
        if not self._access.decide_place(self._access.access_of(inbound)).answers:
            return  # a server not allowed: no answer at all, not even the id line a message gets
        try:
            await interaction.response.defer(ephemeral=ephemeral, thinking=True)  # 3 s to acknowledge
            reply = await self._handler(inbound, stored=_no_confirmation)
            if reply is None or not reply.text.strip():
                await interaction.delete_original_response()
                return
            for chunk in split_message(reply.text, DISCORD_LIMIT):
                await interaction.followup.send(chunk, ephemeral=ephemeral, allowed_mentions=NO_PINGS)
        except Exception:  # one bad event must not end the client
            log.exception("discord command %s failed", text,
                          extra={"channel": self.name, "chat_id": chat_id})
