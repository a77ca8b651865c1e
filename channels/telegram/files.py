"""files_of: the photo, document, voice note, audio or round video a Telegram message carries, as IncomingFiles."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from telegram import Message, TelegramObject

from channels.base import IncomingFile

Fetcher = Callable[[str], Callable[[], Awaitable[bytes]]]  # file_id -> what downloads it


def files_of(message: Message, fetcher: Fetcher) -> tuple[IncomingFile, ...]:
    """A photo (its largest size), a document or a sound; fetched only if the router answers it."""
    if message.photo:
        largest = message.photo[-1]
        return (IncomingFile("photo.jpg", "image/jpeg", largest.file_size or 0,
                             fetcher(largest.file_id), is_photo=True),)
    document = message.document
    if document is not None:
        return (IncomingFile(document.file_name or "file", document.mime_type or "", document.file_size or 0,
                             fetcher(document.file_id)),)
    return _sound_of(message, fetcher)


def _sound_of(message: Message, fetcher: Fetcher) -> tuple[IncomingFile, ...]:
    """A voice note, an audio file or a round video message: transcribed if the router answers it."""
    voice, audio, video_note = message.voice, message.audio, message.video_note
    if voice is not None:
        return (IncomingFile("voice.ogg", voice.mime_type or "audio/ogg", voice.file_size or 0,
                             fetcher(voice.file_id), is_voice=True, duration=_seconds(voice)),)
    if audio is not None:
        return (IncomingFile(audio.file_name or "audio", audio.mime_type or "", audio.file_size or 0,
                             fetcher(audio.file_id), is_voice=True, duration=_seconds(audio)),)
    if video_note is not None:
        return (IncomingFile("video_note.mp4", "video/mp4", video_note.file_size or 0,
                             fetcher(video_note.file_id), is_voice=True, duration=_seconds(video_note)),)
    return ()


def _seconds(media: TelegramObject) -> float | None:
    """The duration Telegram sent, read from the wire form (the attribute warns that its type
    will change from seconds to a timedelta)."""
    value = media.to_dict().get("duration")
    return float(value) if isinstance(value, (int, float)) else None
