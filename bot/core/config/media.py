"""`mate.media`: photos, files and voice transcription."""

from __future__ import annotations

import re

from pydantic import (
    Field,
    field_validator,
)

from bot.core.config.base import EndpointSection, Section


class TranscriptionConfig(EndpointSection):
    """A speech-to-text endpoint (POST <base-url>/audio/transcriptions) for voice notes."""

    model: str = "whisper-1"
    language: str | None = None  # ISO-639-1 ("en", "zh"); None: the server detects it

    @field_validator("model")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name the transcription model, e.g. whisper-1")
        return value.strip()

    @field_validator("language")
    @classmethod
    def _language_code(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not re.fullmatch(r"[A-Za-z]{2,3}", value.strip()):
            raise ValueError("must be a language code such as en or zh")
        return value.strip().lower()


class MediaConfig(Section):
    """Images, files and voice notes people send: how large, how many per message."""

    max_file_mb: float = Field(10, gt=0, le=30)
    max_files: int = Field(5, ge=1, le=20)
    max_audio_minutes: float = Field(10, gt=0, le=240)  # longer voice notes and audio are refused
    # None: voice notes get a line saying how to turn transcription on.
    transcription: TranscriptionConfig | None = None
