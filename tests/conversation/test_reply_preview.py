"""ThrottledPreview on its own: when it shows, what it shows, and that closing never hangs (SPEC S21)."""

from __future__ import annotations

import asyncio
import time

from channels.formatting import utf16_len
from channels.streaming import ThrottledPreview


async def test_close_gives_up_on_an_update_that_hangs() -> None:
    started = asyncio.Event()

    async def hang(text: str) -> None:
        started.set()
        await asyncio.sleep(3600)

    preview = ThrottledPreview(hang, limit=100)
    preview.text("hello")
    await asyncio.wait_for(started.wait(), 1)
    began = time.monotonic()
    await preview.close(wait=0.2)
    assert time.monotonic() - began < 1.0
    assert preview.shown == ""  # nobody knows what the chat shows


async def test_close_lets_a_quick_update_finish() -> None:
    shown: list[str] = []

    async def show(text: str) -> None:
        await asyncio.sleep(0.05)
        shown.append(text)

    preview = ThrottledPreview(show, limit=100)
    preview.text("hello")
    await asyncio.sleep(0.01)
    await preview.close()
    assert shown == ["hello"] and preview.shown == "hello"


async def test_the_limit_counts_with_the_channels_own_length() -> None:
    shown: list[str] = []

    async def show(text: str) -> None:
        shown.append(text)

    preview = ThrottledPreview(show, limit=10, length=utf16_len)
    preview.text("😀" * 8)  # 16 UTF-16 units
    await asyncio.sleep(0.05)
    await preview.close()
    assert utf16_len(shown[0]) <= 10 and shown[0].endswith("…")


async def test_an_unchanged_preview_is_shown_again_before_it_expires() -> None:
    shown: list[str] = []

    async def show(text: str) -> None:
        shown.append(text)

    preview = ThrottledPreview(show, limit=100, interval=0.01, refresh=0.1)
    preview.status("Working on it…")
    await asyncio.sleep(0.35)
    await preview.close()
    assert len(shown) >= 3 and set(shown) == {"Working on it…"}
