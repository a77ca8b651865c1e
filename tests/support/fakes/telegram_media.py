"""Files in the fake Telegram: the media messages a test pushes, getFile and the download endpoint."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tests.support.fakes.telegram_html import BadRequestReason
from tests.support.fakes.telegram_updates import TelegramUpdates


class TelegramMedia(TelegramUpdates):
    """Photos, documents, voice notes, audio and video notes as Telegram sends them, each with
    its file stored for getFile and a download from /file/bot<token>/<path> (recorded in `downloads`)."""

    # -- test-facing API ---------------------------------------------------------------------

    def add_file(self, data: bytes, suffix: str = ".bin", *, folder: str = "documents") -> dict[str, Any]:
        """A file the bot can fetch with getFile; the file fields a message carries."""
        number = len(self._files) + 1
        file_id = f"file-{number}-{len(data)}"
        self._files[file_id] = (data, f"{folder}/file_{number}{suffix}")
        return {"file_id": file_id, "file_unique_id": f"uniq-file-{number}", "file_size": len(data)}

    def push_photo(
        self, data: bytes, *, width: int, height: int, caption: str | None = None, chat_id: int = 42,
        user_id: int = 42, chat_type: str = "private", media_group_id: str | None = None,
    ) -> dict[str, Any]:
        """A photo as Telegram sends it: several sizes, the largest last. Photos of one
        album share a media_group_id, one message (and update) each."""
        message = self._incoming(chat_id, user_id, chat_type)
        if media_group_id is not None:
            message["media_group_id"] = media_group_id
        thumb = self.add_file(data[:64], ".jpg", folder="photos")  # not a picture: the bot must take the largest
        full = self.add_file(data, ".jpg", folder="photos")
        scale = 90 / max(width, height)
        message["photo"] = [
            {**thumb, "width": max(1, int(width * scale)), "height": max(1, int(height * scale))},
            {**full, "width": width, "height": height},
        ]
        self._caption(message, caption)
        return self._push_message(message)

    def push_document(
        self, data: bytes, file_name: str, mime_type: str, *, caption: str | None = None, chat_id: int = 42,
        user_id: int = 42, chat_type: str = "private", size: int | None = None,
    ) -> dict[str, Any]:
        message = self._incoming(chat_id, user_id, chat_type)
        fields = self.add_file(data, "." + file_name.rpartition(".")[2] if "." in file_name else "")
        if size is not None:
            fields["file_size"] = size
        message["document"] = {**fields, "file_name": file_name, "mime_type": mime_type}
        self._caption(message, caption)
        return self._push_message(message)

    def push_voice(
        self, data: bytes, *, duration: int, chat_id: int = 42, user_id: int = 42, chat_type: str = "private",
        reply_to_bot: bool = False,
    ) -> dict[str, Any]:
        """A voice note as Telegram sends it: OGG/Opus, stored as voice/file_N.oga."""
        message = self._incoming(chat_id, user_id, chat_type)
        message["voice"] = {**self.add_file(data, ".oga", folder="voice"), "duration": duration,
                            "mime_type": "audio/ogg"}
        if reply_to_bot:
            message["reply_to_message"] = self._bot_message(chat_id, {"text": "earlier reply"}, None)
        return self._push_message(message)

    def push_audio(
        self, data: bytes, file_name: str, mime_type: str, *, duration: int, caption: str | None = None,
        chat_id: int = 42, user_id: int = 42,
    ) -> dict[str, Any]:
        """A music or audio file (sent as audio, not as a document)."""
        message = self._incoming(chat_id, user_id, "private" if chat_id > 0 else "group")
        suffix = "." + file_name.rpartition(".")[2] if "." in file_name else ""
        message["audio"] = {**self.add_file(data, suffix, folder="music"), "duration": duration,
                            "file_name": file_name, "mime_type": mime_type, "title": file_name}
        self._caption(message, caption)
        return self._push_message(message)

    def push_video_note(self, data: bytes, *, duration: int, chat_id: int = 42, user_id: int = 42) -> dict[str, Any]:
        """A round video message: MP4, no name and no MIME type."""
        message = self._incoming(chat_id, user_id, "private" if chat_id > 0 else "group")
        message["video_note"] = {**self.add_file(data, ".mp4", folder="video_notes"), "duration": duration,
                                 "length": 240}
        return self._push_message(message)

    # -- getFile and the file endpoint -------------------------------------------------------

    def _get_file(self, params: dict[str, Any]) -> dict[str, Any]:
        found = self._files.get(str(params.get("file_id")))
        if found is None:
            raise BadRequestReason("invalid file_id")
        data, path = found
        if len(data) > 20 * 1024 * 1024:  # what the Bot API lets a bot download
            raise BadRequestReason("file is too big")
        return {"file_id": params["file_id"], "file_unique_id": f"uniq-{params['file_id']}",
                "file_size": len(data), "file_path": path}

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        path = request.match_info["path"]
        for data, file_path in self._files.values():
            if file_path == path:
                self.downloads.append(path)
                return web.Response(body=data, content_type="application/octet-stream")
        return web.Response(status=404, text="Not Found")

