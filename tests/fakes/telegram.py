"""In-process fake of the Telegram Bot API that a real python-telegram-bot client can talk to."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
from collections import defaultdict, deque
from types import TracebackType
from typing import Any, Callable

from aiohttp import web

from tests.fakes.telegram_html import BadRequestReason, parse_html, utf16_len

# Telegram types these parameters as free text; everything else PTB sends as a JSON string.
_TEXT_FIELDS = frozenset(
    {
        "text", "caption", "parse_mode", "action", "title", "description", "short_description",
        "name", "language_code", "emoji", "query", "question", "explanation", "url",
        "inline_message_id", "callback_query_id", "business_connection_id", "first_name",
        "last_name", "phone_number", "address", "message_effect_id", "secret_token",
        "file_id", "sticker", "photo", "document", "audio", "video", "voice", "animation",
    }
)  # fmt: skip


# (time.monotonic() at receipt, method, chat_id, text) of a text a user could now see.
Visible = tuple[float, str, Any, str]

MAX_TEXT_LENGTH = 4096  # characters after entity parsing
NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are exactly the "
    "same as a current content and reply markup of the message"
)


def _decode(key: str, value: Any) -> Any:
    """Turn one wire value back into the Python value the client meant."""
    if not isinstance(value, str):
        return value  # JSON bodies already carry their types
    if key in _TEXT_FIELDS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value  # e.g. chat_id="@channel" or an opaque file id


class FakeTelegram:
    """A scriptable Bot API server on 127.0.0.1 with a random port.

    Its network can fail as a real one does: `serving=False` reserves the port but refuses
    connections until `serve()`; `drop_network()` refuses new connections and cuts the open
    ones until `restore_network()`. `reject_token()` answers every method 401 (or 404), and
    `polling_conflict` answers getUpdates 409 as Telegram does when another poller is active.
    `offsets` records the offset of every getUpdates call: what the client confirmed.
    `push_update()` queues an update dict as given and `push_raw()` any JSON value, so updates
    the client cannot read can be handed out; `answer_next()` scripts one odd answer.

    sendMessage, sendMessageDraft and editMessageText follow Telegram's rules (HTML parse mode
    parsed into text and entities, length limits, drafts only in private chats, "message is not
    modified"); what they accept lands in `sent`, `drafts` and `edits`, and every text a user
    could see, with its receipt time, in `visible`.
    """

    token: str = "123456:TEST"
    CONFLICT = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"

    def __init__(self, token: str | None = None, *, serving: bool = True) -> None:
        if token is not None:
            self.token = token
        self.bot_user: dict[str, Any] = {
            "id": 999,
            "is_bot": True,
            "first_name": "Mate",
            "username": "mate_bot",
        }
        self.base_url = ""
        self.base_file_url = ""
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[dict[str, Any]] = []
        self.drafts: list[dict[str, Any]] = []  # params of every accepted sendMessageDraft
        self.edits: list[dict[str, Any]] = []  # params of every accepted editMessageText
        self.deleted: list[dict[str, Any]] = []  # params of every accepted deleteMessage
        self.downloads: list[str] = []  # file paths fetched from the file endpoint
        self._files: dict[str, tuple[bytes, str]] = {}  # file_id -> (content, file_path)
        self.visible: list[Visible] = []
        self.commands: list[dict[str, Any]] = []
        self._updates: list[Any] = []  # update dicts, or whatever push_raw() queued
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._messages: dict[tuple[Any, int], dict[str, Any]] = {}
        self._chat_types: dict[Any, str] = {}
        self._failures: dict[str, deque[dict[str, Any]]] = defaultdict(deque)  # scripted next answers
        self.offsets: list[int | None] = []  # the offset of each getUpdates call, in order
        self.handed_out: list[list[int | None]] = []  # the update ids each getUpdates answer held
        self.polling_conflict = False
        self._rejected_status: int | None = None
        self._start_serving = serving
        self._serving = False
        self._sock: socket.socket | None = None
        self._site: web.SockSite | None = None
        self._transports: set[Any] = set()  # asyncio transports of the open connections
        # Replaced on every change so waiters (long polls, wait_for_sent) wake and re-check.
        self._changed = asyncio.Event()
        self._closing = False
        self._runner: web.AppRunner | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "getMe": lambda p: self.bot_user,
            "deleteWebhook": lambda p: True,
            "sendMessage": self._send_message,
            "sendMessageDraft": self._send_message_draft,
            "sendChatAction": lambda p: True,
            "setMyCommands": self._set_my_commands,
            "getMyCommands": lambda p: self.commands,
            "deleteMyCommands": self._delete_my_commands,
            "editMessageText": self._edit_message_text,
            "deleteMessage": self._delete_message,
            "getFile": self._get_file,
            "close": lambda p: True,
            "logOut": lambda p: True,
        }

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> FakeTelegram:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        self._sock = _reserve_port(0)
        port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/bot"
        self.base_file_url = f"http://127.0.0.1:{port}/file/bot"
        if self._start_serving:
            await self.serve()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Release pending long polls first so cleanup does not wait for them.
        self._closing = True
        self._notify()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # -- network -----------------------------------------------------------------------------

    @property
    def serving(self) -> bool:
        return self._serving

    async def serve(self) -> None:
        """Start answering on the reserved port (the server "comes up")."""
        if self._serving:
            return
        assert self._runner is not None and self._sock is not None, "use `async with FakeTelegram()`"
        self._site = web.SockSite(self._runner, self._sock)
        await self._site.start()
        self._serving = True

    async def drop_network(self) -> None:
        """Refuse new connections and cut the open ones (long polls included) until restore_network()."""
        if not self._serving:
            return
        assert self._site is not None and self._sock is not None
        port = self._sock.getsockname()[1]
        self._serving = False
        await self._site.stop()  # closes the listening socket
        self._site = None
        self._sock = _reserve_port(port)  # bound, not listening: connections are refused
        for transport in list(self._transports):
            transport.abort()
        self._transports.clear()
        self._notify()  # pending long polls give up at once

    async def restore_network(self) -> None:
        await self.serve()

    def reject_token(self, status: int = 401) -> None:
        """Answer every method as Telegram answers a revoked or wrong token (401, or 404)."""
        self._rejected_status = status

    @property
    def confirmed_below(self) -> int:
        """Every update id below this was confirmed by a getUpdates offset (0: none yet)."""
        return max((o for o in self.offsets if o is not None and o > 0), default=0)

    # -- test-facing API ---------------------------------------------------------------------

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == method]

    def push_update(self, update: dict[str, Any]) -> None:
        """Queue an update as given (malformed ones too), numbered if it has no update_id."""
        if "update_id" not in update:
            update["update_id"] = next(self._update_ids)
        self._updates.append(update)
        self._notify()

    def push_raw(self, entry: Any) -> None:
        """Queue any JSON value as a getUpdates entry, as is. One without an integer update_id
        cannot be confirmed by an offset: it is handed out once."""
        self._updates.append(entry)
        self._notify()

    def push_text(
        self,
        text: str,
        *,
        chat_id: int = 42,
        user_id: int = 42,
        chat_type: str = "private",
        first_name: str = "Alice",
        username: str | None = "alice",
        message_thread_id: int | None = None,
        is_topic_message: bool = False,
        reply_to_bot: bool = False,
        entities: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        message = self._incoming(chat_id, user_id, chat_type, first_name, username)
        message["text"] = text
        message["entities"] = self._auto_entities(text) if entities is None else entities
        if message_thread_id is not None:
            message["message_thread_id"] = message_thread_id
            if chat_type == "supergroup":
                message["chat"]["is_forum"] = True
        if is_topic_message:
            message["is_topic_message"] = True
        if reply_to_bot:
            message["reply_to_message"] = self._bot_message(
                chat_id, {"text": "earlier reply"}, message_thread_id
            )
        return self._push_message(message)

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

    def _caption(self, message: dict[str, Any], caption: str | None) -> None:
        if caption is not None:
            message["caption"] = caption
            if entities := self._auto_entities(caption):
                message["caption_entities"] = entities

    def push_sticker(self, *, chat_id: int = 42, user_id: int = 42) -> dict[str, Any]:
        message = self._incoming(chat_id, user_id, "private" if chat_id > 0 else "group")
        message["sticker"] = {
            "file_id": f"sticker-{message['message_id']}",
            "file_unique_id": f"uniq-{message['message_id']}",
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
            "emoji": "👍",
        }
        return self._push_message(message)

    def fail_next(
        self,
        method: str,
        *,
        error_code: int,
        description: str,
        retry_after: int | None = None,
    ) -> None:
        if retry_after is not None and retry_after < 1:
            # PTB only raises RetryAfter for a truthy retry_after; 0 would surface as NetworkError.
            raise ValueError("retry_after must be >= 1: PTB ignores retry_after=0")
        error: dict[str, Any] = {"ok": False, "error_code": error_code, "description": description}
        if retry_after is not None:
            error["parameters"] = {"retry_after": retry_after}
        self._failures[method].append(error)

    def answer_next(self, method: str, result: Any) -> None:
        """Answer the next call of `method` with `{"ok": true, "result": result}`, whatever `result` is."""
        self._failures[method].append({"ok": True, "result": result})

    async def wait_for_sent(self, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        if not await self._wait_until(lambda: len(self.sent) >= count, timeout):
            raise AssertionError(
                f"expected {count} sent message(s) within {timeout}s, got {len(self.sent)}: "
                f"{self.sent!r}; calls: {[name for name, _ in self.calls]}"
            )
        return list(self.sent)

    async def wait_for_call(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        """The parameters of the first call of `method`, waiting for it to arrive."""
        if not await self._wait_until(lambda: bool(self.calls_of(method)), timeout):
            raise AssertionError(f"no {method} call within {timeout}s; calls: {[name for name, _ in self.calls]}")
        return self.calls_of(method)[0]

    async def wait_for_visible(
        self, predicate: Callable[[Visible], bool] = lambda entry: True, timeout: float = 30.0
    ) -> Visible:
        """The first entry of `visible` that matches `predicate`, waiting for it to arrive."""

        def first() -> Visible | None:
            return next((entry for entry in self.visible if predicate(entry)), None)

        if not await self._wait_until(lambda: first() is not None, timeout):
            raise AssertionError(f"no matching visible text within {timeout}s; visible: {self.visible!r}")
        entry = first()
        assert entry is not None
        return entry

    # -- HTTP --------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        transport = request.transport
        if not self._serving:  # a connection accepted just before the network dropped
            if transport is not None:
                transport.abort()
            return web.Response(status=503)
        if transport is not None:
            self._transports.add(transport)
        if self._rejected_status is not None or request.match_info["token"] != self.token:
            # PTB maps 401/404 to InvalidToken.
            status = self._rejected_status or 401
            description = "Not Found" if status == 404 else "Unauthorized"
            return self._reply({"ok": False, "error_code": status, "description": description})
        method = request.match_info["method"]
        params = await self._params(request)
        self.calls.append((method, params))
        self._notify()
        if self._failures[method]:
            return self._reply(self._failures[method].popleft())
        if method == "getUpdates":
            self.offsets.append(None if params.get("offset") is None else int(params["offset"]))
            if self.polling_conflict:
                return self._reply({"ok": False, "error_code": 409, "description": self.CONFLICT})
            result: Any = await self._get_updates(params)
            if not self._serving:  # the network dropped during the long poll: no answer arrives
                return web.Response(status=503)
            self.handed_out.append([_update_id(u) for u in result])
        else:
            handler = self._handlers.get(method, self._fallback(method))
            try:
                result = handler(params)
            except BadRequestReason as exc:
                return self._reply({"ok": False, "error_code": 400, "description": exc.description})
        return self._reply({"ok": True, "result": result})

    @staticmethod
    async def _params(request: web.Request) -> dict[str, Any]:
        raw: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            body = await request.json() if request.can_read_body else {}
            raw.update(body or {})
        elif request.can_read_body:
            for key, value in (await request.post()).items():
                if isinstance(value, web.FileField):
                    raw[key] = {
                        "filename": value.filename,
                        "content_type": value.content_type,
                        "data": value.file.read(),
                    }
                else:
                    raw[key] = value
        params = {key: _decode(key, value) for key, value in raw.items()}
        if isinstance(params.get("chat_id"), str) and params["chat_id"].lstrip("-").isdigit():
            params["chat_id"] = int(params["chat_id"])
        return params

    @staticmethod
    def _reply(payload: dict[str, Any]) -> web.Response:
        status = 200 if payload["ok"] else int(payload["error_code"])
        return web.json_response(payload, status=status)

    # -- methods -----------------------------------------------------------------------------

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        if offset > 0:
            # Telegram forgets everything below the offset: that is the confirmation.
            self._updates = [u for u in self._updates if _update_id(u) is None or _update_id(u) >= offset]
        elif offset < 0:
            self._updates = self._updates[offset:]
        # Capped at 1 s so a test never blocks on a long poll.
        wait = min(float(params.get("timeout") or 0), 1.0)
        await self._wait_until(lambda: bool(self._updates) or self._closing or not self._serving, wait)
        limit = int(params.get("limit") or 100)
        result = self._updates[:limit]
        once = {id(u) for u in result if _update_id(u) is None}
        self._updates = [u for u in self._updates if id(u) not in once]
        return result

    def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        reply = params.get("reply_parameters")
        if isinstance(reply, dict) and "reply_to_message_id" not in params:
            # PTB 22 always sends reply_parameters; expose the flat id tests usually want.
            params["reply_to_message_id"] = reply.get("message_id")
        text, entities = _content(params)
        if not text.strip():
            raise BadRequestReason("message text is empty")
        if len(text) > MAX_TEXT_LENGTH:
            raise BadRequestReason("message is too long")
        fields: dict[str, Any] = {"text": text}
        if entities:
            fields["entities"] = entities
        if markup := _inline_markup(params):
            fields["reply_markup"] = markup
        message = self._bot_message(params["chat_id"], fields, params.get("message_thread_id"))
        reply_id = params.get("reply_to_message_id")
        if reply_id is not None and (params["chat_id"], reply_id) in self._messages:
            message["reply_to_message"] = self._messages[(params["chat_id"], reply_id)]
        self.sent.append(params)
        self._show("sendMessage", params["chat_id"], text)
        return message

    def _send_message_draft(self, params: dict[str, Any]) -> bool:
        chat_id = params.get("chat_id")
        if self._chat(chat_id)["type"] != "private":
            raise BadRequestReason("method is available only for private chats")
        draft_id = params.get("draft_id")
        if not isinstance(draft_id, int) or isinstance(draft_id, bool) or draft_id == 0:
            raise BadRequestReason("draft_id must be a non-zero integer")
        text, _ = _content(params)
        if len(text) > MAX_TEXT_LENGTH:
            raise BadRequestReason("message is too long")
        self.drafts.append(params)
        if text:  # Bot API 10.0: an empty draft is a "Thinking..." placeholder, not text
            self._show("sendMessageDraft", chat_id, text)
        else:
            self._notify()
        return True

    def _set_my_commands(self, params: dict[str, Any]) -> bool:
        self.commands = list(params.get("commands") or [])
        return True

    def _delete_my_commands(self, params: dict[str, Any]) -> bool:
        self.commands = []
        return True

    def _edit_message_text(self, params: dict[str, Any]) -> dict[str, Any] | bool:
        text, entities = _content(params)
        if not text.strip():
            raise BadRequestReason("message text is empty")
        if len(text) > MAX_TEXT_LENGTH:
            raise BadRequestReason("MESSAGE_TOO_LONG")
        markup = _inline_markup(params)
        if "inline_message_id" in params:
            self.edits.append(params)
            self._show("editMessageText", None, text)
            return True  # Telegram answers inline edits with a bare True.
        message_id = params.get("message_id")
        message = None
        if isinstance(message_id, int):
            message = self._messages.get((params.get("chat_id"), message_id))
        if message is None:
            raise BadRequestReason("message to edit not found")
        if message["from"]["id"] != self.bot_user["id"]:
            raise BadRequestReason("message can't be edited")
        if "text" not in message:
            raise BadRequestReason("there is no text in the message to edit")
        current = (message["text"], message.get("entities", []), message.get("reply_markup"))
        if (text, entities, markup) == current:
            raise BadRequestReason(NOT_MODIFIED)
        message.update(text=text, edit_date=int(time.time()))
        for field, value in (("entities", entities), ("reply_markup", markup)):
            if value:
                message[field] = value
            else:
                message.pop(field, None)
        self.edits.append(params)
        self._show("editMessageText", params.get("chat_id"), text)
        return message

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

    def _delete_message(self, params: dict[str, Any]) -> bool:
        key = (params.get("chat_id"), params.get("message_id"))
        if key not in self._messages:
            raise BadRequestReason("message to delete not found")
        del self._messages[key]
        self.deleted.append(params)
        self._show("deleteMessage", params.get("chat_id"), "")
        return True

    def _fallback(self, method: str) -> Callable[[dict[str, Any]], Any]:
        if not method.startswith("send"):
            return lambda p: True

        # PTB parses send* results as Message objects; a bare True would crash it.
        def send(p: dict[str, Any]) -> Any:
            fields = {"caption": p["caption"]} if "caption" in p else {}
            message = self._bot_message(p.get("chat_id", 0), fields, p.get("message_thread_id"))
            return [message] if method == "sendMediaGroup" else message

        return send

    # -- builders ----------------------------------------------------------------------------

    def _chat(self, chat_id: Any, chat_type: str | None = None) -> dict[str, Any]:
        if chat_type is None:
            default = "private" if isinstance(chat_id, int) and chat_id > 0 else "supergroup"
            chat_type = self._chat_types.get(chat_id, default)
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = "Alice"
        else:
            chat["title"] = "Test Group"
        return chat

    def _incoming(
        self,
        chat_id: int,
        user_id: int,
        chat_type: str,
        first_name: str = "Alice",
        username: str | None = "alice",
    ) -> dict[str, Any]:
        self._chat_types[chat_id] = chat_type
        chat = self._chat(chat_id, chat_type)
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username is not None:
            user["username"] = username
        if chat_type == "private":
            chat.update({k: v for k, v in user.items() if k in ("first_name", "username")})
        return {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": user,
        }

    def _push_message(self, message: dict[str, Any]) -> dict[str, Any]:
        self._messages[(message["chat"]["id"], message["message_id"])] = message
        update = {"update_id": next(self._update_ids), "message": message}
        self.push_update(update)
        return update

    def _bot_message(
        self, chat_id: Any, fields: dict[str, Any], thread_id: int | None
    ) -> dict[str, Any]:
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": self._chat(chat_id),
            "from": self.bot_user,
            **fields,
        }
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        self._messages[(chat_id, message["message_id"])] = message
        return message

    def _auto_entities(self, text: str) -> list[dict[str, Any]]:
        entities: list[dict[str, Any]] = []
        command_end = 0
        if text.startswith("/"):
            command = text.split(maxsplit=1)[0]
            command_end = len(command)
            entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(command)})
        mention = f"@{self.bot_user['username']}"
        start = text.find(mention, command_end)
        if start >= 0:
            entities.append(
                {
                    "type": "mention",
                    "offset": utf16_len(text[:start]),
                    "length": utf16_len(mention),
                }
            )
        return entities

    # -- waiting -----------------------------------------------------------------------------

    def _show(self, method: str, chat_id: Any, text: str) -> None:
        # Handlers run with no await after the request body is read: now is its receipt time.
        self.visible.append((time.monotonic(), method, chat_id, text))
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return predicate()
        return True


def _update_id(entry: Any) -> int | None:
    """The entry's update_id when it is an integer (what an offset can confirm)."""
    update_id = entry.get("update_id") if isinstance(entry, dict) else None
    return update_id if type(update_id) is int else None


def _inline_markup(params: dict[str, Any]) -> dict[str, Any] | None:
    """The inline keyboard a message carries; other keyboards are not part of the message."""
    markup = params.get("reply_markup")
    return markup if isinstance(markup, dict) and "inline_keyboard" in markup else None


def _content(params: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The text and entities a user sees: explicit entities win, else HTML parse mode is parsed.

    Markdown modes are not parsed: their text is kept as sent, without entities.
    """
    text = str(params.get("text") or "")
    if params.get("entities"):
        return text, list(params["entities"])
    if str(params.get("parse_mode") or "").lower() == "html":
        return parse_html(text)
    return text, []


def _reserve_port(port: int) -> socket.socket:
    """A socket bound to 127.0.0.1:port but not listening: it holds the port, connections are refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.setblocking(False)
    return sock
