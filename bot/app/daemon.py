"""The daemon: channels, memory worker, scheduler and API in one TaskGroup, stopped in order (SPEC S14)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import termios
from datetime import timedelta
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

from bot.app.api.token import token_whereabouts
from bot.core.clock import iso, utc_now
from bot.core.config import Config, LlmConfig
from bot.core.errors import ConfigError
from bot.conversation.incognito import IncognitoExpiry
from bot.app.instance_lock import DatabaseLock
from bot.core.prompts import PromptLibrary
from bot.core.retry import CRASH_RESTART, Backoff, RetryStreak
from bot.app.runtime import Runtime, open_runtime, tune_garbage_collector
from bot.app.services import Services, start_services
from channels.base import Channel, InboundMessage, OutboundMessage, ReplyStream, parse_conversation_key, can_send
from channels.console import ConsoleChannel

log = logging.getLogger(__name__)

SHUTDOWN_GRACE = 5.0
EXIT_SECOND_SIGNAL = 130
READY_LINE = "matebot ready"


async def supervise(name: str, run: Callable[[], Awaitable[None]], stop: asyncio.Event,
                    *, backoff: Backoff = CRASH_RESTART) -> None:
    """Run `run` until stop; a crash is logged and retried with backoff, never taking others down."""
    restarts = RetryStreak(backoff)
    while not stop.is_set():
        try:
            await run()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            delay = restarts.next()
            log.exception("%s failed; restarting in %.0f s", name, delay)
        try:
            await asyncio.wait_for(stop.wait(), delay)
        except TimeoutError:
            pass


def _install_signals(stop: asyncio.Event) -> Callable[[], None]:
    loop = asyncio.get_running_loop()
    terminal = _terminal_modes()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        # A second signal, not a signal after `stop`: the console sets stop when it closes, and
        # its Ctrl+C is raised as a signal that may arrive just after.
        received.append(signum)
        if len(received) > 1:
            # At once, as promised: SQLite's journal keeps the database whole, and pending
            # memory work is in its table; nothing is gained by waiting for the rest.
            _restore_terminal(terminal)  # the console's prompt may still hold it in raw mode
            # Straight to the file descriptor: sys.stderr may be the console's proxy, whose
            # writer thread would not run again before the exit.
            os.write(2, b"matebot: second signal, exiting now\n")
            logging.shutdown()
            os._exit(EXIT_SECOND_SIGNAL)
        log.info("signal %s: stopping", signal.Signals(signum).name)
        if signum == signal.SIGINT and terminal is not None:
            # Replies in flight may take mate.shutdown-drain-seconds: say that waiting is optional.
            print("matebot: stopping (Ctrl+C again exits at once)", file=sys.stderr, flush=True)
        stop.set()

    installed = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signal support
            pass

    def remove() -> None:
        for signum in installed:
            loop.remove_signal_handler(signum)

    return remove


def _terminal_modes() -> list[Any] | None:
    """stdin's terminal modes, to put back on an immediate exit; None when stdin is no terminal."""
    try:
        return termios.tcgetattr(sys.stdin.fileno()) if sys.stdin.isatty() else None
    except (OSError, ValueError, termios.error):  # closed, detached, or not a real file
        return None


def _restore_terminal(modes: list[Any] | None) -> None:
    if modes is None:
        return
    try:
        fd = sys.stdin.fileno()
        # Only from the terminal's foreground job: in the background (`matebot run &`) tcsetattr
        # raises SIGTTOU, which stops the process instead of letting it exit, and the modes are
        # then the foreground job's (the shell's) to keep.
        if os.tcgetpgrp(fd) == os.getpgrp():
            termios.tcsetattr(fd, termios.TCSANOW, modes)
    except (OSError, ValueError, termios.error):
        pass


def console_wanted(config: Config) -> bool:
    setting = config.mate.channels.console.enabled
    return sys.stdin.isatty() if setting == "auto" else bool(setting)


async def run_daemon(
    config: Config, *, console: bool | None = None, stop: asyncio.Event | None = None,
    exit_when_console_closes: bool = False, ready: Callable[[Runtime, Services], None] | None = None,
) -> int:
    problem = config.mate.channels.missing_token()
    if problem:  # before anything starts: one line naming the key, as for the rest of the file
        raise ConfigError(problem)
    stop = stop or asyncio.Event()
    remove_signals = _install_signals(stop)
    try:
        with DatabaseLock(config.mate.database.path):
            return await _serve(config, stop, console, exit_when_console_closes, ready)
    finally:
        remove_signals()


async def _serve(
    config: Config, stop: asyncio.Event, console: bool | None, exit_when_console_closes: bool,
    ready: Callable[[Runtime, Services], None] | None,
) -> int:
    async with open_runtime(config) as rt, AsyncExitStack() as stack:
        if rt.offline:
            log.warning(offline_notice(rt.core.prompts, config.mate.llm, os.environ))
        services = await start_services(config, rt, stack)  # closed by the stack in reverse order
        channels = services.channels
        async with asyncio.TaskGroup() as tasks:
            running: list[asyncio.Task[None]] = []
            if rt.memory_services is not None:
                worker = rt.memory_services.worker
                await worker.recover()
                running.append(tasks.create_task(supervise("memory worker", worker.run, stop),
                                                 name="memory-worker"))
            expiry = IncognitoExpiry(rt.core.repos.incognito, config.mate.memory.incognito_hours, rt.window.forget)
            running.append(tasks.create_task(supervise("incognito expiry", expiry.run, stop), name="incognito"))
            for channel in channels:
                running.append(tasks.create_task(supervise(f"{channel.name} channel", channel.run, stop),
                                                 name=f"channel-{channel.name}"))
            with_console = console if console is not None else console_wanted(config)
            if with_console:
                running.append(tasks.create_task(_run_console(rt, stop, exit_when_console_closes, services),
                                                 name="console"))
            if config.mate.recovery_minutes > 0:
                running.append(tasks.create_task(_recover(config, rt, channels), name="recovery"))
            tune_garbage_collector()
            log.info(READY_LINE)
            # The token rides in the page's address only when a person reads the line: under
            # systemd or docker it would land in the journal, which others may read.
            on_terminal = sys.stderr.isatty()
            if not on_terminal and services.api is not None:
                log.info("web chat: the API token is %s", token_whereabouts(config))
            print(startup_line(config, rt, services, with_console, show_token=on_terminal),
                  file=sys.stderr, flush=True)
            if ready is not None:
                ready(rt, services)
            await stop.wait()
            drain = config.mate.shutdown_drain_seconds
            try:
                async with asyncio.timeout(drain + SHUTDOWN_GRACE):
                    await _shutdown(rt, channels, running, drain)
            except TimeoutError:
                log.warning("shutdown took longer than %.0f s; stopping what is left", drain + SHUTDOWN_GRACE)
                for task in running:
                    task.cancel()
    return 0


def startup_line(config: Config, rt: Runtime, services: Services, with_console: bool,
                 *, show_token: bool) -> str:
    """One line: which provider, model and channels are live, and where the web page is.

    With `show_token` the page's address carries the token (the page logs in by itself);
    otherwise the line says where the token is kept."""
    mate = config.mate
    mismatch = other_protocol_key(mate.llm, os.environ) if rt.offline else None
    offline = f"offline ({mismatch[0]} is not read with mate.llm.api {mate.llm.api}: canned replies)" \
        if mismatch else "offline (no API key: canned replies)"
    provider = offline if rt.offline else f"{_protocol_name(mate.llm.protocol)}, model {mate.llm.model}"
    names = [channel.name for channel in services.channels] + (["console"] if with_console else [])
    line = f"matebot: ready — provider {provider}; channels: {', '.join(names) or 'none'}"
    if services.api is not None:
        token = services.api.token
        host = "127.0.0.1" if mate.api.host in ("0.0.0.0", "::", "") else mate.api.host
        line += f"; web chat: http://{host}:{services.api.port}/"
        if token and show_token:  # printed, never logged: no log file may hold the token
            line += f"#token={token}"
        elif token:
            line += f" (the token is {token_whereabouts(config)})"
    return line


def offline_notice(prompts: PromptLibrary, llm: LlmConfig, environ: Mapping[str, str]) -> str:
    """The start-up line of offline mode, naming the variable the chosen protocol reads its key from,
    or, when the other protocol's key is what the environment holds, that key and the setting to change."""
    mismatch = other_protocol_key(llm, environ)
    if mismatch is not None:
        found, wanted = mismatch
        return prompts.text("offline_other_key", found=found, api=llm.api, wanted=wanted)
    names = llm.key_variables
    keys = names[0] if len(names) == 1 else prompts.text("offline_either_key", first=names[0], second=names[1])
    return prompts.text("offline_notice", keys=keys)


def other_protocol_key(llm: LlmConfig, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(the variable set, the mate.llm.api value that would read it) when the key in the environment
    belongs to the protocol not chosen: OPENAI_API_KEY with api anthropic, or the reverse."""
    if llm.uses_anthropic:
        return None
    if llm.api == "anthropic" and environ.get("OPENAI_API_KEY"):
        return "OPENAI_API_KEY", "openai"
    if llm.api == "openai" and environ.get("ANTHROPIC_API_KEY"):
        return "ANTHROPIC_API_KEY", "anthropic"
    return None


async def _recover(config: Config, rt: Runtime, channels: Sequence[Channel]) -> None:
    """Answer messages the previous run stored but never answered, each once, on its channel."""
    since = iso(utc_now() - timedelta(minutes=config.mate.recovery_minutes))
    try:
        replies = await rt.router.recover_unanswered(since)
    except Exception:  # boundary: recovery must not stop the daemon
        log.exception("recovering unanswered messages failed")
        return
    by_name = {channel.name: channel for channel in channels}
    for reply in replies:
        target = parse_conversation_key(reply.conversation_id)
        channel = by_name.get(target[0]) if target else None
        if target is None or channel is None:
            continue  # console and web: the answer is in the conversation's history
        await _send_when_ready(channel, OutboundMessage(target[0], target[1], reply.text, target[2]))
    if replies:
        log.info("answered %d messages left unanswered by the previous run", len(replies))


async def _send_when_ready(channel: Channel, message: OutboundMessage, wait: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while not can_send(channel.state) and loop.time() < deadline:
        await asyncio.sleep(0.2)
    try:
        await channel.send(message)
    except Exception as exc:  # the reply is stored; the user sees it in the history
        log.warning("could not send a recovered answer on %s: %s", channel.name, exc)


async def _stop_channel(channel: Channel) -> None:
    try:
        await channel.stop()
    except Exception:
        log.exception("stopping %s failed", channel.name)


async def _run_console(rt: Runtime, stop: asyncio.Event, exit_on_close: bool, services: Services) -> None:
    async def handle(message: InboundMessage, stream: ReplyStream | None = None) -> str | None:
        reply = await rt.router.handle(message, stream=stream)
        return reply.text if reply else None

    prompts = rt.core.prompts
    # Said on a terminal only: a script piping lines in (or out) reads nothing but the answers.
    on_terminal = sys.stdin.isatty() and sys.stdout.isatty()
    welcome = prompts.text("console_welcome_chat" if exit_on_close else "console_welcome_run") if on_terminal else ""
    console = ConsoleChannel(handle, prompts=prompts, welcome=welcome)
    services.outbox.add(console)  # reminders set at the console are printed there

    async def close_on_stop() -> None:
        # The prompt gives the terminal back at once, so a second Ctrl+C is a signal, not a key;
        # a reply in flight is still printed (the router drains it).
        await stop.wait()
        await console.stop()

    closing = asyncio.create_task(close_on_stop(), name="console-close")
    try:
        await console.run()
    except (OSError, ValueError) as exc:  # stdin not readable as a stream (closed, a plain file...)
        log.warning("console unavailable: %s", exc)
    finally:
        closing.cancel()
    if exit_on_close:
        stop.set()


async def _shutdown(
    rt: Runtime, channels: Sequence[Channel], running: list[asyncio.Task[None]], drain: float,
) -> None:
    """Stop intake, finish in-flight replies (bounded), leave memory work pending, then close."""
    rt.router.stop_intake()
    stops = [asyncio.create_task(_stop_channel(channel), name=f"stop-{channel.name}") for channel in channels]
    if not await rt.router.drain(drain):
        log.warning("in-flight replies did not finish within %.0f s", drain)
    if stops:
        await asyncio.wait(stops, timeout=SHUTDOWN_GRACE)
    # Cancelling the worker loop leaves unfinished memory work pending in the table.
    for task in running:
        task.cancel()


def _protocol_name(protocol: str) -> str:
    return "anthropic" if protocol == "anthropic" else "openai-compatible"
