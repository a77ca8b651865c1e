"""VoiceNoteReader: a voice note or audio file checked against the limits and turned into "[voice] <transcript>".

Telegram voice notes, audio files and round video messages and Discord audio attachments
come here. A note longer than `max-audio-minutes` is refused before it is downloaded where
the platform tells its duration, else by its size; without a transcription endpoint the
answer says how to turn one on; a failed transcription gets its own apology, and nothing
of the message reaches the model.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from bot.core.errors import MediaRefused
from bot.core.text import clean_text
from bot.media.transcription import Transcriber, TranscriptionFailed
from channels.base import IncomingFile

log = logging.getLogger(__name__)

# Where the platform does not tell the duration: the highest common audio bit rate (320 kbit/s
# MP3) bounds the seconds a file of this size can hold. A voice note (Opus, ~32 kbit/s) is
# bounded by its duration instead.
AUDIO_BYTES_PER_SECOND = 40_000
VOICE_MARKER = "[voice]"

_AUDIO_SUFFIXES = frozenset(".ogg .oga .opus .mp3 .m4a .mpga .wav .flac .aac .amr".split())  # sound, by name
_UPLOAD_SUFFIXES = _AUDIO_SUFFIXES | {".mp4", ".mpeg", ".webm"}  # what the servers take
_EXTENSIONS = {"audio/ogg": "ogg", "audio/opus": "ogg", "audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/mp4": "m4a",
               "audio/x-m4a": "m4a", "audio/aac": "aac", "audio/wav": "wav", "audio/x-wav": "wav",
               "audio/wave": "wav", "audio/webm": "webm", "audio/flac": "flac", "audio/x-flac": "flac",
               "video/mp4": "mp4", "audio/amr": "amr"}


def is_audio(file: IncomingFile) -> bool:
    """A voice note, or a file whose type or name says it is sound."""
    if file.is_voice:
        return True
    kind = file.media_type.split(";")[0].strip().lower()
    return kind.startswith("audio/") or (not kind and _suffix(file) in _AUDIO_SUFFIXES)


@dataclass(frozen=True, slots=True)
class HeardNote:
    """One transcribed note: the text for the conversation, the audio to keep."""

    text: str  # "[voice] <transcript>"
    audio: bytes
    extension: str  # of the copy under data/media


class VoiceNoteReader:
    """Checks a voice note against the limits (before download) and transcribes it (after)."""

    def __init__(self, transcriber: Transcriber | None, *, max_minutes: float, address: str = "") -> None:
        self._transcriber = transcriber
        self._max_seconds = max_minutes * 60
        self._max_minutes = f"{max_minutes:g}"
        self._address = address  # for log lines: no key, no password

    def check(self, file: IncomingFile) -> None:
        """Raises MediaRefused for a note that will not be transcribed; nothing is downloaded yet."""
        if self._transcriber is None:
            raise MediaRefused("voice_off")
        if (file.duration or 0) > self._max_seconds or self._too_large(file.size):
            raise MediaRefused("voice_too_long", limit=self._max_minutes)

    def _too_large(self, size: int) -> bool:
        """More bytes than the longest allowed note holds at the highest common bit rate: a
        duration the sender's app reports is not trusted to stand for the file's length."""
        return size > self._max_seconds * AUDIO_BYTES_PER_SECOND

    async def hear(self, file: IncomingFile, data: bytes) -> HeardNote:
        """The note's words; raises MediaRefused when it could not be transcribed or holds none."""
        assert self._transcriber is not None, "check() refuses every note without a transcriber"
        if self._too_large(len(data)):
            raise MediaRefused("voice_too_long", limit=self._max_minutes)
        extension = _extension(file)
        started = time.monotonic()
        try:
            transcript = await self._transcriber.transcribe(data, _upload_name(file, extension))
        except TranscriptionFailed as failed:
            log.warning("transcribing a voice note failed: %s (%s)", failed.reason, self._address)
            raise MediaRefused("voice_failed") from None
        text = " ".join(clean_text(transcript).split())
        log.info("transcribed a voice note of %d bytes in %.1f s (%d characters)", len(data),
                 time.monotonic() - started, len(text))
        if not text:
            raise MediaRefused("voice_empty")
        return HeardNote(f"{VOICE_MARKER} {text}", data, extension)


def _suffix(file: IncomingFile) -> str:
    return Path(file.filename).suffix.lower() if file.filename else ""


def _extension(file: IncomingFile) -> str:
    suffix = _suffix(file)
    if suffix in _UPLOAD_SUFFIXES:
        return "ogg" if suffix == ".oga" else suffix[1:]
    return _EXTENSIONS.get(file.media_type.split(";")[0].strip().lower(), "ogg")


def _upload_name(file: IncomingFile, extension: str) -> str:
    """What the server is told the file is called: servers tell the format by its extension."""
    stem = Path(file.filename).stem if file.filename else ""
    safe = "".join(c for c in stem if c.isalnum() or c in "-_")[:60] or "voice"
    return f"{safe}.{extension}"
