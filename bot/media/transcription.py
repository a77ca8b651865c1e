"""OpenAITranscriber: a voice note's audio to its text, through an OpenAI-compatible speech-to-text endpoint.

`base-url` is what the `openai` SDK takes (`https://api.openai.com/v1`,
`http://127.0.0.1:8080/v1`); the request is `POST <base-url>/audio/transcriptions`, a
multipart form with the file, the model and the language when one is set. whisper.cpp's
server, faster-whisper servers (speaches), OpenAI and Groq all answer it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol
from urllib.parse import urlsplit

from bot.core.config import TranscriptionConfig
from bot.core.lifecycle import AsyncResource

log = logging.getLogger(__name__)

# Seconds one voice note may take. A CPU server transcribes ten minutes of speech in about a
# minute with a small model; a hosted one in seconds.
TRANSCRIPTION_TIMEOUT = 180.0
MAX_TRANSCRIPT_CHARS = 100_000  # ten minutes of speech is about 10 000 characters


class TranscriptionFailed(Exception):
    """The endpoint gave no transcript; `reason` is for the log (no address, no key)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Transcriber(Protocol):
    async def transcribe(self, audio: bytes, filename: str) -> str:
        """The words spoken in `audio` ("" for silence); raises TranscriptionFailed."""
        ...


class OpenAITranscriber(AsyncResource):
    """POST <base-url>/audio/transcriptions through the openai SDK; every failure is a TranscriptionFailed."""

    def __init__(self, config: TranscriptionConfig, *, timeout: float = TRANSCRIPTION_TIMEOUT,
                 max_retries: int = 1, sdk: Any = None) -> None:
        self._model = config.model
        self._language = config.language
        self._timeout = timeout
        self.address = shown_address(config.base_url)
        if sdk is None:
            import openai  # only when configured: the SDK costs start-up time otherwise

            # The SDK insists on a key; a local server that wants none ignores this one.
            sdk = openai.AsyncOpenAI(base_url=config.base_url, api_key=config.api_key or "none",
                                     max_retries=max_retries, timeout=timeout)
        self._sdk = sdk

    async def close(self) -> None:
        await self._sdk.close()

    async def transcribe(self, audio: bytes, filename: str) -> str:
        import openai

        extra: dict[str, Any] = {"language": self._language} if self._language else {}
        try:
            async with asyncio.timeout(self._timeout):  # the retry included: one bound per note
                result = await self._sdk.audio.transcriptions.create(
                    model=self._model, file=(filename, audio), response_format="json", **extra)
        except openai.APIStatusError as exc:
            raise TranscriptionFailed(f"HTTP {exc.status_code}") from None
        except (openai.APITimeoutError, TimeoutError):
            raise TranscriptionFailed(f"no answer within {self._timeout:g} s") from None
        except openai.APIConnectionError:
            raise TranscriptionFailed("unreachable") from None
        except (openai.OpenAIError, ValueError, TypeError) as exc:  # an answer that is not the API's JSON
            raise TranscriptionFailed(f"an unreadable answer ({type(exc).__name__})") from None
        text = getattr(result, "text", None)
        if not isinstance(text, str):  # e.g. an HTML page served with status 200
            raise TranscriptionFailed("an answer without a transcript")
        return text.strip()[:MAX_TRANSCRIPT_CHARS]


def shown_address(base_url: str) -> str:
    """The address for a log line: no user name or password, no query."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"
