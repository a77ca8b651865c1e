"""Counting a PDF's pages in one forward pass: time linear in the file, whatever its bytes.

Page objects ("/Type /Page") are counted in the file and inside its compressed object
streams (/Type /ObjStm), where most modern writers put them. Every search starts where the
previous one ended. (The regular expression this replaces, `stream\\r?\\n(.*?)\\r?\\nendstream`,
rescanned the rest of the file for every "stream" left open: a 200 KB file cost minutes of
CPU with the GIL held, so even a worker thread froze the event loop.)
"""

from __future__ import annotations

import re
import zlib

from bot.media.bounded_work import Deadline

# A literal, then one character class, then a literal: a failed try gives back only the
# white space after one "/Type", and those runs never overlap, so a whole scan is linear.
_PAGE_OBJECT = re.compile(rb"/Type[ \t\n\r\f\v\x00]*/Page(?![A-Za-z])")
# One object stream inflates to at most this, all of them together to at most the total:
# a few KB of zlib can inflate to gigabytes.
STREAM_INFLATE_MAX = 8 * 1024 * 1024
TOTAL_INFLATE_MAX = 64 * 1024 * 1024
# A writer puts 100-200 objects in each object stream; a file with more of them than this
# is counted from the first ones (the provider checks the real page count anyway).
OBJECT_STREAMS_MAX = 4096
DICT_MAX = 1024  # how far "/ObjStm" may stand before its "stream" keyword
CHECK_EVERY = 1024  # page objects between two deadline checks
# `re` holds the GIL for a whole search: the file is searched a window at a time, so the
# event loop's thread gets its turn (and the deadline is checked) between windows.
WINDOW = 1024 * 1024


def pdf_pages(data: bytes, *, stop_after: int | None = None, deadline: Deadline | None = None) -> int:
    """The pages of a PDF, at least 1. With `stop_after`, counting ends as soon as there are
    more than that many (the answer is then stop_after + 1).
    Raises WorkTimedOut when `deadline` passes."""
    counter = _PageCounter(stop_after, deadline)
    counter.count_in(data)
    _count_in_object_streams(data, counter)
    return max(1, counter.pages)


class _PageCounter:
    """Page objects seen so far, and when to stop looking."""

    def __init__(self, stop_after: int | None, deadline: Deadline | None) -> None:
        self.pages = 0
        self._stop_after = stop_after
        self._deadline = deadline

    @property
    def enough(self) -> bool:
        return self._stop_after is not None and self.pages > self._stop_after

    def check(self) -> None:
        if self._deadline is not None:
            self._deadline.check()

    def count_in(self, data: bytes) -> None:
        """Adds the "/Type /Page" objects of `data` ("/Type /Pages", the page tree, is not one)."""
        start = 0
        while start < len(data) and not self.enough:
            self.check()
            # Windows end where a "/Type" begins: no page object can reach across that.
            stop = data.find(b"/Type", start + WINDOW)
            stop = len(data) if stop == -1 else stop
            for _ in _PAGE_OBJECT.finditer(data, start, stop):
                if self.enough:
                    return
                self.pages += 1
                if self.pages % CHECK_EVERY == 0:
                    self.check()
            start = stop


def _count_in_object_streams(data: bytes, counter: _PageCounter) -> None:
    """Adds the page objects of the object streams that zlib (FlateDecode) compressed."""
    budget = TOTAL_INFLATE_MAX
    position = 0  # everything before it has been read
    with memoryview(data) as view:
        for _ in range(OBJECT_STREAMS_MAX):
            if budget <= 0 or counter.enough:
                return
            marker = data.find(b"/ObjStm", position)
            if marker == -1:
                return
            keyword = data.find(b"stream", marker, marker + DICT_MAX)
            body = None if keyword == -1 else _body_start(data, keyword)
            if body is None:  # "/ObjStm" with no stream of its own after it
                position = marker + 7
                continue
            end = data.find(b"endstream", body)
            if end == -1:
                return  # no later stream can end either
            try:
                inflated = zlib.decompressobj().decompress(view[body:end], min(STREAM_INFLATE_MAX, budget))
            except zlib.error:  # another filter, or damaged
                inflated = b""
            budget -= len(inflated)
            counter.count_in(inflated)
            position = end + 9


def _body_start(data: bytes, keyword: int) -> int | None:
    """Where a stream's bytes begin: after "stream" and its end of line (CRLF or LF)."""
    after = keyword + 6
    if data.startswith(b"\r\n", after):
        return after + 2
    if data.startswith(b"\n", after):
        return after + 1
    return None
