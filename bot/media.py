"""MediaPreparer: photos and files people send, turned into what the model reads.

Images become image blocks (scaled so the long side is at most 1568 px, the size the
provider works at; larger only costs upload time), PDFs document blocks, and text-like
files their text. Each image or PDF is kept under data/media/<sha256>.<ext>; the
conversation's history keeps a marker ("[image]") instead of the bytes, so later turns
do not pay for the picture again.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import logging
import math
import os
import re
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.config import MediaConfig
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

_IMAGE_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp"}
_TEXT_SUFFIXES = frozenset(
    ".txt .md .markdown .rst .py .json .jsonl .csv .tsv .log .yaml .yml .toml .ini .cfg .conf .xml .html .htm "
    ".css .js .ts .tsx .jsx .sh .bash .zsh .c .h .cc .cpp .hpp .java .kt .go .rs .rb .php .sql .swift .lua "
    ".r .tex .srt .vtt .env .gitignore .dockerfile".split())
_TEXT_TYPES = frozenset({"application/json", "application/xml", "application/x-yaml", "application/yaml",
                         "application/toml", "application/x-sh", "application/javascript", "application/sql"})
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


class MediaRefused(Exception):
    """A file the agent will not read; `key` and `params` name the polite answer in strings.yaml."""

    def __init__(self, key: str, **params: Any) -> None:
        super().__init__(key)
        self.key = key
        self.params = params


@dataclass(slots=True)
class PreparedMedia:
    """What one message's files add: blocks for this turn, text for the history."""

    blocks: list[dict[str, Any]] = field(default_factory=list)  # image / document blocks
    markers: list[str] = field(default_factory=list)  # "[image]", "[document: report.pdf]"
    texts: list[str] = field(default_factory=list)  # text files, as "[file: notes.md]\n..."
    tokens: int = 0  # the blocks' estimate (text is counted with the message)
    sent_bytes: int = 0  # what the blocks weigh before base64

    def history_text(self, caption: str) -> str:
        """The message as later turns see it: markers, the caption, then any text files."""
        head = " ".join([*self.markers, caption.strip()]).strip()
        return "\n\n".join(part for part in (head, *self.texts) if part)


class MediaPreparer:
    """Checks, converts and stores the files of one message."""

    def __init__(self, config: MediaConfig, root: Path) -> None:
        self._config = config
        self._root = root
        self._max_bytes = int(config.max_file_mb * 1024 * 1024)

    async def prepare(self, files: Sequence[IncomingFile]) -> PreparedMedia:
        """Raises MediaRefused with the answer to give when a file cannot be read."""
        if len(files) > self._config.max_files:
            raise MediaRefused("media_too_many", count=len(files), limit=self._config.max_files)
        prepared = PreparedMedia()
        for file in files:
            name = _display_name(file)
            if file.size > self._max_bytes:
                raise MediaRefused("media_too_large", name=name, limit=_mb(self._max_bytes))
            if _clearly_unreadable(file):  # no need to download a video to know it is one
                raise MediaRefused("media_unsupported", name=name)
            try:
                data = await file.read()
            except Exception as exc:  # the platform's download failed: the user can send it again
                log.warning("could not download an attachment: %s", type(exc).__name__)
                raise MediaRefused("media_download_failed", name=name) from None
            if len(data) > self._max_bytes:
                raise MediaRefused("media_too_large", name=name, limit=_mb(self._max_bytes))
            await self._add(prepared, file, name, data)
        return prepared

    async def _add(self, prepared: PreparedMedia, file: IncomingFile, name: str, data: bytes) -> None:
        if data.startswith(b"%PDF-"):
            pages = await asyncio.to_thread(pdf_pages, data)
            if pages > PDF_MAX_PAGES:
                raise MediaRefused("media_pdf_too_long", name=name, limit=PDF_MAX_PAGES)
            self._check_total(prepared, len(data), name)
            await asyncio.to_thread(self._store, data, "pdf")
            prepared.blocks.append(_block("document", "application/pdf", data))
            prepared.markers.append(f"[document: {name}]")
            prepared.tokens += pages * PDF_PAGE_TOKENS
            return
        if _looks_textual(file):
            prepared.texts.append(f"[file: {name}]\n{_text_of(data, name)}")
            return
        image = await asyncio.to_thread(_image, data, file.is_photo or file.media_type.startswith("image/"))
        if image is None:
            raise MediaRefused("media_unsupported", name=name)
        media_type, encoded, width, height = image
        self._check_total(prepared, len(encoded), name)
        await asyncio.to_thread(self._store, encoded, media_type.partition("/")[2])
        prepared.blocks.append(_block("image", media_type, encoded))
        prepared.markers.append("[image]")
        prepared.tokens += image_tokens(width, height)

    @staticmethod
    def _check_total(prepared: PreparedMedia, size: int, name: str) -> None:
        prepared.sent_bytes += size
        if prepared.sent_bytes > MAX_MESSAGE_BYTES:  # the provider takes 32 MB per request, in base64
            raise MediaRefused("media_too_large_together", name=name, limit=_mb(MAX_MESSAGE_BYTES))

    def _store(self, data: bytes, extension: str) -> None:
        """data/media/<sha256>.<ext>, written once (the same picture sent twice is one file).

        A copy for the owner, not needed for the answer: a full disk costs a log line."""
        path = self._root / f"{hashlib.sha256(data).hexdigest()}.{extension}"
        if path.exists():
            return
        partial: Path | None = None
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            # A name of its own: the same picture arriving twice at once must not share one.
            with tempfile.NamedTemporaryFile(dir=self._root, suffix=".part", delete=False) as out:
                partial = Path(out.name)
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, path)
        except OSError as exc:
            log.warning("could not keep a copy of an attachment in %s: %s", self._root, exc)
            if partial is not None:
                with contextlib.suppress(OSError):
                    partial.unlink(missing_ok=True)


def image_tokens(width: int, height: int) -> int:
    return min(IMAGE_TOKENS_MAX, math.ceil(width * height / 750))


def _block(kind: str, media_type: str, data: bytes) -> dict[str, Any]:
    return {"type": kind, "source": {"type": "base64", "media_type": media_type,
                                     "data": base64.b64encode(data).decode("ascii")}}


def _image(data: bytes, expected: bool) -> tuple[str, bytes, int, int] | None:
    """(media type, bytes to send, width, height), or None when it is not an image we can read."""
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
            opened.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE), Image.Resampling.LANCZOS)
            image = ImageOps.exif_transpose(opened) if rotated else opened
            width, height = image.size
            out = io.BytesIO()
            # Screenshots (PNG) stay lossless so their text stays sharp, unless that is too big.
            if fmt == "PNG" or (image.mode in ("RGBA", "LA", "P") and fmt != "JPEG"):
                image.save(out, "PNG", optimize=True)
                if out.tell() <= IMAGE_MAX_BYTES:
                    return "image/png", out.getvalue(), width, height
                out = io.BytesIO()
            image.convert("RGB").save(out, "JPEG", quality=85)
            return "image/jpeg", out.getvalue(), width, height
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError, SyntaxError, EOFError):
        if expected:
            log.info("an image could not be read")
        return None


_ORIENTATION = 0x0112  # the EXIF tag phones use instead of turning the pixels
_STREAM = re.compile(rb"stream\r?\n(.*?)\r?\nendstream", re.S)


def pdf_pages(data: bytes) -> int:
    """The pages of a PDF: page objects in the file and in its compressed object streams
    (where most modern writers put them), at least 1."""
    pages = len(_PDF_PAGE.findall(data))
    for match in _STREAM.finditer(data):
        chunk = match.group(1)
        if not chunk.startswith((b"x", b"H")):  # only zlib (FlateDecode) streams can hold objects
            continue
        try:
            pages += len(_PDF_PAGE.findall(zlib.decompressobj().decompress(chunk, 8 * 1024 * 1024)))
        except zlib.error:
            continue
    return max(1, pages)


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
