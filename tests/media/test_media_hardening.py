"""A crafted PDF never freezes the daemon: pages counted in linear time, media read off the event loop
within a time limit, /healthz and SIGTERM answered meanwhile."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from PIL import Image

from bot.media.bounded_work import Deadline, ThreadWorkRunner, WorkTimedOut
from bot.core.config import MediaConfig
from bot.media.preparer import PDF_MAX_PAGES, MediaPreparer, MediaRefused
from bot.media.pdf_pages import STREAM_INFLATE_MAX, TOTAL_INFLATE_MAX, pdf_pages
from bot.core.prompts import PromptLibrary
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply
from tests.support.fakes.telegram import FakeTelegram
from tests.support.media_files import PDF, attached, picture
from tests.support.daemon_process import PROCESS_TIMEOUT
from tests.support.daemon_process import Daemon, daemon, free_port, wait_for, write_config
from tests.support.fakes.anthropic import is_memory_request

GROUP = -100200300
MEMBER = 555  # any member of an allowed group: not on any allowlist


def crafted_pdf(size: int) -> bytes:
    """What froze the old counter: "stream" keywords that never end, each one made the regex
    `stream\\r?\\n(.*?)\\r?\\nendstream` read the rest of the file again (quadratic)."""
    head = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n"
    return head + b"stream\n" * ((size - len(head)) // 7)


def object_stream(objects: bytes, *, eol: bytes = b"\n") -> bytes:
    compressed = zlib.compress(objects)
    return (b"7 0 obj << /Type /ObjStm /N 3 /First 20 /Filter /FlateDecode /Length %d >>" % len(compressed)
            + b"\nstream" + eol + compressed + eol + b"endstream\nendobj\n")


# -- the counter: right on real-shaped files ---------------------------------------------------


def test_pages_written_by_a_real_pdf_writer_are_counted() -> None:
    out = io.BytesIO()
    first, *rest = [Image.new("RGB", (60, 80), (i * 40, 0, 0)) for i in range(5)]
    first.save(out, "PDF", save_all=True, append_images=rest)  # Pillow's PDF writer: five pages
    assert pdf_pages(out.getvalue()) == 5
    assert pdf_pages(PDF) == 2


@pytest.mark.parametrize(("body", "pages"), [
    (b"1 0 obj <</Type/Page/Parent 2 0 R>> endobj", 1),  # no white space at all
    (b"1 0 obj <</Type\r\n  /Page>> endobj", 1),
    (b"2 0 obj <</Type /Pages /Count 3>> endobj 3 0 obj <</Type /PageLabel>> endobj", 1),  # not pages: none, so 1
    (b"/Type /Page " * 7, 7),
])
def test_page_objects_are_told_from_the_page_tree(body: bytes, pages: int) -> None:
    assert pdf_pages(b"%PDF-1.4\n" + body) == pages


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_pages_in_compressed_object_streams_are_counted_with_the_plain_ones(eol: bytes) -> None:
    inside = b"3 0 4 30 5 60 <</Type /Page /Parent 2 0 R>> <</Type/Page>> <</Type /Pages /Kids []>> "
    pdf = b"%PDF-1.5\n1 0 obj <</Type /Page>> endobj\n" + object_stream(inside, eol=eol) + b"%%EOF\n"
    assert pdf_pages(pdf) == 3  # two compressed, one plain


def test_streams_that_are_not_zlib_object_streams_are_skipped() -> None:
    image = b"8 0 obj <</Type /XObject /Subtype /Image /Filter /FlateDecode>>\nstream\n"
    image += zlib.compress(b"/Type /Page " * 50) + b"\nendstream\nendobj\n"  # not where objects live
    damaged = b"9 0 obj <</Type /ObjStm /Filter /FlateDecode>>\nstream\nx\x9c not zlib at all\nendstream\n"
    assert pdf_pages(b"%PDF-1.5\n" + image + damaged + object_stream(b"<</Type /Page>> " * 4)) == 4


def test_a_zip_bomb_inflates_only_so_far() -> None:
    # Each stream inflates to 8 MiB: a page object, then white space. Past the per-stream
    # cap nothing more is read of a stream, and past the total no further stream is.
    one = object_stream(b"<</Type /Page>>" + b" " * STREAM_INFLATE_MAX + b"<</Type /Page>>")
    assert pdf_pages(b"%PDF-1.5\n" + one) == 1  # the second page object lies beyond the cap
    many = b"%PDF-1.5\n" + one * (TOTAL_INFLATE_MAX // STREAM_INFLATE_MAX + 8)
    assert len(many) < 200 * 1024
    assert pdf_pages(many) == TOTAL_INFLATE_MAX // STREAM_INFLATE_MAX


def test_counting_stops_once_there_are_too_many_pages() -> None:
    assert pdf_pages(b"%PDF-1.4\n" + b"<</Type /Page>> " * 5000, stop_after=PDF_MAX_PAGES) == PDF_MAX_PAGES + 1


def test_an_expired_or_stopped_deadline_ends_the_count() -> None:
    with pytest.raises(WorkTimedOut):
        pdf_pages(b"%PDF-1.4\n" + b"<</Type /Page>> " * 10, deadline=Deadline(0))
    stopped = Deadline(60)
    stopped.stop()
    with pytest.raises(WorkTimedOut):
        pdf_pages(crafted_pdf(64 * 1024), deadline=stopped)


# -- the counter: linear time, whatever the bytes --------------------------------------------


ADVERSARIAL = {
    "open streams": b"stream\n",
    "open streams with bytes": b"stream\nx",
    "type keywords": b"/Type ",
    "long white space": b"/Type" + b" " * 40,
    "page trees": b"/Type /Pages ",
    "page objects": b"<</Type/Page>> ",
    "tiny object streams": b"<</ObjStm>>stream\nx\nendstream\n",
    "object stream markers": b"/ObjStm ",
    "ends without starts": b"endstream\n",
}


def cpu_seconds(data: bytes, repeat: int) -> float:
    """Thread CPU time of `repeat` counts: other processes' load does not count."""
    started = time.thread_time()
    for _ in range(repeat):
        pdf_pages(data)
    return time.thread_time() - started


@pytest.mark.parametrize("unit", ADVERSARIAL.values(), ids=list(ADVERSARIAL))
def test_eight_times_the_bytes_cost_about_eight_times_the_time(unit: bytes) -> None:
    small = b"%PDF-1.4\n" + unit * (8 * 1024 // len(unit))
    large = b"%PDF-1.4\n" + unit * (8 * 8 * 1024 // len(unit))
    repeat = 1
    while cpu_seconds(small, repeat) < 0.005:  # long enough to measure
        repeat *= 4
    small_cost = large_cost = float("inf")
    for _ in range(3):  # the least of three, taken in turns
        small_cost = min(small_cost, cpu_seconds(small, repeat))
        large_cost = min(large_cost, cpu_seconds(large, repeat))
        if large_cost > 1:  # a quadratic counter: once says enough
            break
    # Linear: about 8. Quadratic (the regex this replaced): about 64. Generous room between.
    assert large_cost / small_cost < 24, f"{large_cost / small_cost:.1f}x the time for 8x the bytes"


# -- reading off the event loop, within a time limit -----------------------------------------


async def test_work_past_its_limit_is_given_up_and_told_to_stop() -> None:
    runner = ThreadWorkRunner(parallel=1)
    release = threading.Event()
    seen: list[Deadline] = []

    def stuck(deadline: Deadline) -> str:  # like a picture decoder: no check until it returns
        seen.append(deadline)
        release.wait(30)
        deadline.check()
        return "finished"

    def queued(deadline: Deadline) -> str:
        seen.append(deadline)
        return "ran"

    try:
        results = await asyncio.gather(runner.run(stuck, 0.2), runner.run(queued, 0.2), return_exceptions=True)
        assert [type(r) for r in results] == [WorkTimedOut, WorkTimedOut]
        assert len(seen) == 1 and seen[0].expired  # the queued work never started
        release.set()
        assert await runner.run(lambda deadline: "next", 10) == "next"  # the thread ended on its own
    finally:
        release.set()
        runner.close()


async def test_a_cancelled_wait_stops_the_work() -> None:
    runner = ThreadWorkRunner()
    started = threading.Event()
    stopped = threading.Event()

    def long_work(deadline: Deadline) -> None:
        started.set()
        while not deadline.expired:
            stopped.wait(0.01)
        stopped.set()

    task = asyncio.create_task(runner.run(long_work, 60))
    await wait_for(started.is_set, 10, "the work to start")
    task.cancel()  # what a shutdown does to a message being read
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for(stopped.is_set, 10, "the work to stop")
    runner.close()


async def test_a_file_past_the_time_limit_gets_a_named_answer_in_both_languages(tmp_path: Path) -> None:
    preparer = MediaPreparer(MediaConfig(), tmp_path / "media", time_limit=0)
    with pytest.raises(MediaRefused) as refused:
        await preparer.prepare([attached(PDF, "report.pdf", "application/pdf")])
    preparer.close()
    assert refused.value.key == "media_too_slow"
    english = PromptLibrary("en").text(refused.value.key, **refused.value.params)
    chinese = PromptLibrary("zh-CN").text(refused.value.key, **refused.value.params)
    assert "report.pdf" in english and "15" not in english and "0 seconds" in english
    assert "report.pdf" in chinese and "0 秒" in chinese
    assert not (tmp_path / "media").exists()  # nothing kept of a refused message


async def test_a_refused_file_leaves_nothing_of_its_message_behind(tmp_path: Path) -> None:
    too_long = b"%PDF-1.4\n" + b"<</Type /Page>> " * (PDF_MAX_PAGES + 1)
    preparer = MediaPreparer(MediaConfig(), tmp_path / "media")
    with pytest.raises(MediaRefused) as refused:
        await preparer.prepare([attached(picture(40, 30), photo=True), attached(too_long, "long.pdf")])
    assert refused.value.key == "media_pdf_too_long"
    assert not (tmp_path / "media").exists() or not any((tmp_path / "media").iterdir())
    kept = await preparer.prepare([attached(picture(40, 30), photo=True), attached(PDF, "short.pdf")])
    preparer.close()
    assert len(kept.blocks) == 2 and len(list((tmp_path / "media").iterdir())) == 2


# -- the real daemon: a crafted PDF in a Telegram group ----------------------------------------


def answer_documents(recorded: RecordedRequest) -> Script:
    if is_memory_request(recorded):
        return TextReply(json.dumps({"should_update": False, "reason": "nothing to keep"}))
    return TextReply("It is an empty document.")


def telegram_config(tmp_path: Path, llm: FakeAnthropic, tg: FakeTelegram, port: int, *,
                    offline: bool = False) -> Path:
    """`offline`: the canned client answers, for a test the model plays no part in (no SDK to load)."""
    return write_config(tmp_path, llm, port, **({"llm": {"provider": "offline"}} if offline else {}), **{
        "shutdown-drain-seconds": 1,
        "channels": {"console": {"enabled": False}, "telegram": {
            "enabled": True, "token": tg.token, "base-url": tg.base_url, "group-policy": "allowlist",
            "allowed-groups": [str(GROUP)]}}})


async def longest_health_wait(d: Daemon, done: Callable[[], bool], timeout: float) -> float:
    """Polls GET /healthz one request after another until `done()`; the longest wait for an answer."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + timeout
    longest = 0.0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http:
        while not done():
            started = loop.time()
            async with http.get(f"{d.base}/healthz") as response:
                assert response.status == 200
                await response.read()
            longest = max(longest, loop.time() - started)
            assert loop.time() < give_up, f"no reply within {timeout} s; /healthz waited {longest:.1f} s"
            await asyncio.sleep(0.02)
    return longest


def answers(tg: FakeTelegram) -> int:
    """How many times the whole answer became visible in the group (sent whole, or completed by an edit)."""
    return sum(1 for _, _, _, text in tg.visible if text == "It is an empty document.")


async def test_a_crafted_pdf_in_a_group_never_holds_up_healthz(tmp_path: Path) -> None:
    port = free_port()
    async with FakeAnthropic() as llm, FakeTelegram() as tg:
        llm.responder = answer_documents
        async with daemon(telegram_config(tmp_path, llm, tg, port), port) as d:
            waits = {}
            for size in (60 * 1024, 120 * 1024, 200 * 1024):
                replies = answers(tg)  # a streamed reply may be sent in part and completed by edits
                tg.push_document(crafted_pdf(size), "crafted.pdf", "application/pdf", caption="@mate_bot what is it?",
                                 chat_id=GROUP, user_id=MEMBER, chat_type="group")
                waits[size] = await longest_health_wait(d, lambda: answers(tg) > replies, 60)
                assert waits[size] < 1, f"/healthz waited {waits[size]:.1f} s while a {size // 1024} KB PDF was read"
            log = d.log

    assert answers(tg) == 3 and len(tg.sent) == 3
    last = [r.body["messages"][-1]["content"] for r in llm.requests
            if r.path == "/v1/messages" and not is_memory_request(r)]
    documents = [b for content in last if isinstance(content, list) for b in content if b["type"] == "document"]
    assert len(documents) == 3 and "Traceback" not in log


async def test_sigterm_while_a_crafted_pdf_is_read_stops_the_daemon_promptly(tmp_path: Path) -> None:
    port = free_port()
    async with FakeAnthropic() as llm, FakeTelegram() as tg:
        llm.responder = answer_documents
        async with daemon(telegram_config(tmp_path, llm, tg, port, offline=True), port) as d:
            tg.push_document(crafted_pdf(200 * 1024), "crafted.pdf", "application/pdf",
                             caption="@mate_bot what is it?", chat_id=GROUP, user_id=MEMBER, chat_type="group")
            await wait_for(lambda: bool(tg.downloads), 20, "the download")
            loop = asyncio.get_running_loop()
            started = loop.time()
            d.process.send_signal(signal.SIGTERM)
            code = await d.wait(PROCESS_TIMEOUT)
            elapsed = loop.time() - started
            log = d.log
    assert code == 0, log
    assert elapsed < 1 + 5, elapsed  # the drain (1 s), then the usual stop
    assert "Traceback" not in log, log
