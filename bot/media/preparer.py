"""MediaPreparer: photos, files and voice notes people send, turned into what the model reads.

Images become image blocks (scaled so the long side is at most 1568 px, the size the
provider works at; larger only costs upload time), PDFs document blocks, and text-like
files their text. Each image or PDF is kept under data/media/<sha256>.<ext>; the
conversation's history keeps a marker ("[image]") instead of the bytes, so later turns
do not pay for the picture again. Voice notes become their transcript (bot/media/voice.py), the
audio kept the same way. The reading itself runs in worker threads under a time
limit (bot/media/bounded_work.py), so no file can stall the event loop.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import logging
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bot.media.bounded_work import Deadline, ThreadWorkRunner, WorkTimedOut
from bot.core.config import MediaConfig
from bot.core.errors import MediaRefused as MediaRefused  # where callers have always found it
from bot.media.pdf_pages import pdf_pages
from bot.media.voice import VoiceNoteReader, is_audio
from channels.base import IncomingFile

log = logging.getLogger(__name__)

MAX_IMAGE_SIDE = 1568
IMAGE_MAX_BYTES = 3 * 1024 * 1024  # the provider takes 5 MB of base64 per image
# The provider bills an image about width x height / 750 tokens and scales anything
# larger than about 1.15 megapixels down first, so no image costs more than this.
IMAGE_TOKENS_MAX = 1600
# A PDF page is read as text and as an image: 1 500 - 3 000 tokens each (the provider's
# figures); the window is planned with the upper one.
PDF_PAGE_TOKENS = 3000
PDF_MAX_PAGES = 100  # the provider's limit for one document
MAX_MESSAGE_BYTES = 20 * 1024 * 1024  # 32 MB per request after base64 (4/3), with room for the rest
MAX_IMAGE_PIXELS = 40_000_000  # decoding more would take gigabytes of memory for one picture
# What Pillow may open: formats that hold pictures, not programs (EPS would run Ghostscript).
_OPENABLE = ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF", "AVIF")
TEXT_FILE_MAX_BYTES = 256 * 1024
# Seconds one file may take to read. Real files take well under a second (PDF pages are
# counted in linear time, pictures are bounded by MAX_IMAGE_PIXELS); this answers the rest.
MEDIA_TIME_LIMIT = 15.0

_IMAGE_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp"}
_TEXT_SUFFIXES = frozenset(
    ".txt .md .markdown .rst .py .json .jsonl .csv .tsv .log .yaml .yml .toml .ini .cfg .conf .xml .html .htm "
    ".css .js .ts .tsx .jsx .sh .bash .zsh .c .h .cc .cpp .hpp .java .kt .go .rs .rb .php .sql .swift .lua "
    ".r .tex .srt .vtt .env .gitignore .dockerfile".split())
_TEXT_TYPES = frozenset({"application/json", "application/xml", "application/x-yaml", "application/yaml",
                         "application/toml", "application/x-sh", "application/javascript", "application/sql"})


@dataclass(slots=True)
class PreparedMedia:
    """What one message's files add: blocks for this turn, text for the history."""

    blocks: list[dict[str, Any]] = field(default_factory=list)  # image / document blocks
    markers: list[str] = field(default_factory=list)  # "[image]", "[document: report.pdf]"
    voices: list[str] = field(default_factory=list)  # "[voice] <transcript>", one per voice note
    texts: list[str] = field(default_factory=list)  # text files, as "[file: notes.md]\n..."
    tokens: int = 0  # the blocks' estimate (text is counted with the message)
    sent_bytes: int = 0  # what the blocks weigh before base64

    def history_text(self, caption: str) -> str:
        """The message as later turns see it: voice notes, markers, the caption, then any text files."""
        head = " ".join([*self.markers, caption.strip()]).strip()
        return "\n\n".join(part for part in (*self.voices, head, *self.texts) if part)


class MediaPreparer:
    """Checks, converts and stores the files of one message.

    Reading a file (decoding a picture, counting a PDF's pages, decoding text, hashing)
    runs in worker threads, never on the event loop, and each file gets `time_limit`
    seconds: past it the user is told so and nothing of the message is kept.
    """

    def __init__(self, config: MediaConfig, root: Path, *, time_limit: float = MEDIA_TIME_LIMIT,
                 runner: ThreadWorkRunner | None = None, voice: VoiceNoteReader | None = None) -> None:
        self._config = config
        self._voice = voice if voice is not None else VoiceNoteReader(None, max_minutes=config.max_audio_minutes)
        self._root = root
        self._max_bytes = int(config.max_file_mb * 1024 * 1024)
        self._time_limit = time_limit
        self._runner = runner if runner is not None else ThreadWorkRunner(name="matebot-media")

    def close(self) -> None:
        """Drops queued work; a file being read stops at its next deadline check."""
        self._runner.close()

    async def prepare(self, files: Sequence[IncomingFile]) -> PreparedMedia:
        """Raises MediaRefused with the answer to give when a file cannot be read."""
        if len(files) > self._config.max_files:
            raise MediaRefused("media_too_many", count=len(files), limit=self._config.max_files)
        prepared = PreparedMedia()
        keep: list[tuple[bytes, str]] = []
        for file in files:
            name = _display_name(file)
            audio = is_audio(file)
            if audio:  # the limits a voice note has, told before anything is downloaded
                self._voice.check(file)
            if file.size > self._max_bytes:
                raise MediaRefused("media_too_large", name=name, limit=_mb(self._max_bytes))
            if not audio and _clearly_unreadable(file):  # no need to download a video to know it is one
                raise MediaRefused("media_unsupported", name=name)
            try:
                data = await file.read()
            except Exception as exc:  # the platform's download failed: the user can send it again
                log.warning("could not download an attachment: %s", type(exc).__name__)
                raise MediaRefused("media_download_failed", name=name) from None
            if len(data) > self._max_bytes:
                raise MediaRefused("media_too_large", name=name, limit=_mb(self._max_bytes))
            if audio:
                heard = await self._voice.hear(file, data)
                prepared.voices.append(heard.text)
                keep.append((heard.audio, heard.extension))
                continue
            read = await self._read(file, name, data)
            self._check_total(prepared, read.sent_bytes, name)
            read.add_to(prepared)
            if read.keep is not None:
                keep.append(read.keep)
        if keep:  # only once every file was read: a refused message leaves nothing behind
            await self._keep(keep)
        return prepared

    async def _read(self, file: IncomingFile, name: str, data: bytes) -> _Read:
        textual = _looks_textual(file)
        expected_image = file.is_photo or file.media_type.startswith("image/")
        try:
            return await self._runner.run(partial(_read, data, name, textual, expected_image), self._time_limit)
        except WorkTimedOut:
            log.warning("reading an attachment took more than %g s; it was refused", self._time_limit)
            raise MediaRefused("media_too_slow", name=name, seconds=f"{self._time_limit:g}") from None

    @staticmethod
    def _check_total(prepared: PreparedMedia, size: int, name: str) -> None:
        prepared.sent_bytes += size
        if prepared.sent_bytes > MAX_MESSAGE_BYTES:  # the provider takes 32 MB per request, in base64
            raise MediaRefused("media_too_large_together", name=name, limit=_mb(MAX_MESSAGE_BYTES))

    async def _keep(self, files: list[tuple[bytes, str]]) -> None:
        """A copy for the owner, not needed for the answer: a slow disk costs a log line."""
        try:
            await self._runner.run(partial(self._store_all, files), self._time_limit)
        except WorkTimedOut:
            # The thread finishes the file it is writing (whole, under a temporary name,
            # then renamed) and skips the rest.
            log.warning("keeping a copy of the attachments took more than %g s", self._time_limit)

    def _store_all(self, files: list[tuple[bytes, str]], deadline: Deadline) -> None:
        for data, extension in files:
            deadline.check()
            self._store(data, extension)

    def _store(self, data: bytes, extension: str) -> None:
        """data/media/<sha256>.<ext>, written once (the same picture sent twice is one file).

        A copy for the owner, not needed for the answer: a full disk costs a log line."""
        path = self._root / f"{hashlib.sha256(data).hexdigest()}.{extension}"
        if path.exists():
            return
        partial_path: Path | None = None
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            # A name of its own: the same picture arriving twice at once must not share one.
            with tempfile.NamedTemporaryFile(dir=self._root, suffix=".part", delete=False) as out:
                partial_path = Path(out.name)
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial_path, path)
        except OSError as exc:
            log.warning("could not keep a copy of an attachment in %s: %s", self._root, exc)
            if partial_path is not None:
                with contextlib.suppress(OSError):
                    partial_path.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class _Read:
    """What one file adds to the message, made in a worker thread."""

    block: dict[str, Any] | None = None
    marker: str = ""
    text: str = ""
    tokens: int = 0
    sent_bytes: int = 0
    keep: tuple[bytes, str] | None = None  # (bytes, extension) to store under data/media

    def add_to(self, prepared: PreparedMedia) -> None:
        if self.block is not None:
            prepared.blocks.append(self.block)
        if self.marker:
            prepared.markers.append(self.marker)
        if self.text:
            prepared.texts.append(self.text)
        prepared.tokens += self.tokens


def _read(data: bytes, name: str, textual: bool, expected_image: bool, deadline: Deadline) -> _Read:
    """Runs in a worker thread; raises MediaRefused, or WorkTimedOut once `deadline` passes."""
    deadline.check()  # it may have waited its turn past the limit
    if data.startswith(b"%PDF-"):
        pages = pdf_pages(data, stop_after=PDF_MAX_PAGES, deadline=deadline)
        if pages > PDF_MAX_PAGES:
            raise MediaRefused("media_pdf_too_long", name=name, limit=PDF_MAX_PAGES)
        deadline.check()
        return _Read(_block("document", "application/pdf", data), f"[document: {name}]",
                     tokens=pages * PDF_PAGE_TOKENS, sent_bytes=len(data), keep=(data, "pdf"))
    if textual:
        return _Read(text=f"[file: {name}]\n{_text_of(data, name)}")
    image = _image(data, expected_image, deadline)
    if image is None:
        raise MediaRefused("media_unsupported", name=name)
    media_type, encoded, width, height = image
    deadline.check()
    return _Read(_block("image", media_type, encoded), "[image]", tokens=image_tokens(width, height),
                 sent_bytes=len(encoded), keep=(encoded, media_type.partition("/")[2]))


def image_tokens(width: int, height: int) -> int:
    return min(IMAGE_TOKENS_MAX, math.ceil(width * height / 750))


def _block(kind: str, media_type: str, data: bytes) -> dict[str, Any]:
    return {"type": kind, "source": {"type": "base64", "media_type": media_type,
                                     "data": base64.b64encode(data).decode("ascii")}}


def _image(data: bytes, expected: bool, deadline: Deadline) -> tuple[str, bytes, int, int] | None:
    """(media type, bytes to send, width, height), or None when it is not an image we can read.

    Decoding cannot be interrupted; the pixel limit and JPEG drafting bound it, and the
    deadline is checked between the steps."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data), formats=_OPENABLE) as opened:
            fmt = opened.format or ""
            original = opened.size
            if original[0] * original[1] > MAX_IMAGE_PIXELS:
                log.info("an image of %dx%d pixels was refused", *original)
                return None
            if fmt == "JPEG":  # decode at a reduced scale straight away: much less memory and time
                opened.draft("RGB", (MAX_IMAGE_SIDE, MAX_IMAGE_SIDE))
            opened.seek(0)  # an animation: its first frame
            rotated = opened.getexif().get(_ORIENTATION, 1) not in (0, 1)
            if (fmt in _IMAGE_TYPES and max(original) <= MAX_IMAGE_SIDE and not rotated
                    and len(data) <= IMAGE_MAX_BYTES and opened.mode != "CMYK"):
                return _IMAGE_TYPES[fmt], data, original[0], original[1]
            deadline.check()
            opened.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE), Image.Resampling.LANCZOS)
            deadline.check()
            image = ImageOps.exif_transpose(opened) if rotated else opened
            width, height = image.size
            out = io.BytesIO()
            # Screenshots (PNG) stay lossless so their text stays sharp, unless that is too big.
            if fmt == "PNG" or (image.mode in ("RGBA", "LA", "P") and fmt != "JPEG"):
                image.save(out, "PNG", optimize=True)
                if out.tell() <= IMAGE_MAX_BYTES:
                    return "image/png", out.getvalue(), width, height
                deadline.check()
                out = io.BytesIO()
            image.convert("RGB").save(out, "JPEG", quality=85)
            return "image/jpeg", out.getvalue(), width, height
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError, SyntaxError, EOFError):
        if expected:
            log.info("an image could not be read")
        return None


_ORIENTATION = 0x0112  # the EXIF tag phones use instead of turning the pixels


_UNREADABLE_KINDS = ("video/", "audio/")
_UNREADABLE_SUFFIXES = frozenset(".zip .rar .7z .gz .tar .exe .dmg .apk .iso .mp4 .mov .mkv .avi .mp3 .m4a .ogg "
                                 ".oga .opus .wav .flac".split())


def _clearly_unreadable(file: IncomingFile) -> bool:
    suffix = Path(file.filename).suffix.lower() if file.filename else ""
    return file.media_type.lower().startswith(_UNREADABLE_KINDS) or suffix in _UNREADABLE_SUFFIXES


def _looks_textual(file: IncomingFile) -> bool:
    if file.is_photo:
        return False
    suffix = Path(file.filename).suffix.lower() if file.filename else ""
    kind = file.media_type.split(";")[0].strip().lower()
    return suffix in _TEXT_SUFFIXES or kind.startswith("text/") or kind in _TEXT_TYPES


def _text_of(data: bytes, name: str) -> str:
    if len(data) > TEXT_FILE_MAX_BYTES:
        raise MediaRefused("media_text_too_large", name=name, limit=TEXT_FILE_MAX_BYTES // 1024)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise MediaRefused("media_unsupported", name=name) from None
    if "\x00" in text:  # a binary file with a text-like name
        raise MediaRefused("media_unsupported", name=name)
    return text


def _display_name(file: IncomingFile) -> str:
    name = file.filename.strip() or ("photo" if file.is_photo else "file")
    return name.replace("\n", " ")[:120]


def _mb(limit: int) -> str:
    return f"{limit / (1024 * 1024):g}"
