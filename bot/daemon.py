"""The daemon: channels, memory worker, scheduler and API in one TaskGroup, stopped in order (SPEC S14)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

from bot.config import Config
from bot.runtime import Runtime, open_runtime, tune_garbage_collector
from channels.base import InboundMessage
from channels.console import ConsoleChannel

log = logging.getLogger(__name__)

DRAIN_SECONDS = 30.0
READY_LINE = "matebot ready"


async def supervise(name: str, run: Callable[[], Awaitable[None]], stop: asyncio.Event,
                    *, max_backoff: float = 60.0) -> None:
    """Run `run` until stop; a crash is logged and retried with backoff, never taking others down."""
    delay = 1.0
    while not stop.is_set():
        try:
            await run()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed; restarting in %.0f s", name, delay)
        try:
            await asyncio.wait_for(stop.wait(), delay)
        except TimeoutError:
            pass
        delay = min(delay * 2, max_backoff)


def _install_signals(stop: asyncio.Event) -> Callable[[], None]:
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()

    def on_signal(signum: int) -> None:
        if stop.is_set() and main_task is not None:
            log.warning("second signal: cancelling")
            main_task.cancel()
            return
        log.info("signal %s: stopping", signal.Signals(signum).name)
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


def console_wanted(config: Config) -> bool:
    setting = config.mate.channels.console.enabled
    return sys.stdin.isatty() if setting == "auto" else bool(setting)


async def run_daemon(
    config: Config, *, console: bool | None = None, stop: asyncio.Event | None = None,
    exit_when_console_closes: bool = False, ready: Callable[[Runtime], None] | None = None,
) -> int:
    stop = stop or asyncio.Event()
    remove_signals = _install_signals(stop)
    try:
        async with open_runtime(config) as rt, AsyncExitStack() as stack:
            if rt.offline:
                log.warning(rt.core.prompts.text("offline_notice"))
            channels = await _start_services(config, rt, stack)
            async with asyncio.TaskGroup() as tasks:
                running: list[asyncio.Task[None]] = []
                worker = rt.extras.get("worker")
                if worker is not None:
                    await worker.recover()
                    running.append(tasks.create_task(supervise("memory worker", worker.run, stop),
                                                     name="memory-worker"))
                for channel in channels:
                    running.append(tasks.create_task(supervise(f"{channel.name} channel", channel.run, stop),
                                                     name=f"channel-{channel.name}"))
                if console if console is not None else console_wanted(config):
                    running.append(tasks.create_task(_run_console(rt, stop, exit_when_console_closes),
                                                     name="console"))
                tune_garbage_collector()
                log.info(READY_LINE)
                if ready is not None:
                    ready(rt)
                await stop.wait()
                await _shutdown(rt, channels, running)
        return 0
    finally:
        remove_signals()


async def _start_services(config: Config, rt: Runtime, stack: AsyncExitStack) -> list[Any]:
    """API server, scheduler and chat channels, each closed by the stack in reverse order."""
    from bot.services import start_services

    return await start_services(config, rt, stack)


async def _run_console(rt: Runtime, stop: asyncio.Event, exit_on_close: bool) -> None:
    async def handle(message: InboundMessage) -> str | None:
        reply = await rt.router.handle(message)
        return reply.text if reply else None

    console = ConsoleChannel(handle)
    try:
        await console.run()
    except (OSError, ValueError) as exc:  # stdin not readable as a stream (closed, a plain file...)
        log.warning("console unavailable: %s", exc)
    if exit_on_close:
        stop.set()


async def _shutdown(rt: Runtime, channels: list[Any], running: list[asyncio.Task[None]]) -> None:
    """Stop intake, finish in-flight replies (bounded), leave memory work pending, then close."""
    rt.router.stop_intake()
    for channel in channels:
        try:
            await channel.stop()
        except Exception:
            log.exception("stopping %s failed", channel.name)
    if not await rt.router.drain(DRAIN_SECONDS):
        log.warning("in-flight replies did not finish within %.0f s", DRAIN_SECONDS)
    # Cancelling the worker loop leaves unfinished memory work pending in the table.
    for task in running:
        task.cancel()
