"""In-process fake of the Telegram Bot API that a real python-telegram-bot client can talk to."""

from __future__ import annotations

import socket
from collections import defaultdict, deque
from types import TracebackType
from typing import Any, Callable

from aiohttp import web

from tests.support.fakes.telegram_html import BadRequestReason
from tests.support.fakes.telegram_media import TelegramMedia
from tests.support.fakes.telegram_methods import TelegramMethods
from tests.support.fakes.telegram_state import Visible
from tests.support.fakes.telegram_wire import MAX_TEXT_LENGTH, NOT_MODIFIED, api_reply, read_params, update_id_of

__all__ = ["MAX_TEXT_LENGTH", "NOT_MODIFIED", "FakeTelegram", "Visible"]


class FakeTelegram(TelegramMethods, TelegramMedia):
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

    This module serves HTTP and scripts the network and answers; the rest is in its bases:
    telegram_state (what it holds and received, waiting), telegram_updates (updates a test
    pushes), telegram_media (files), telegram_methods (the Bot API methods).
    """

    CONFLICT = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"

    WEBHOOK_ACTIVE = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"

    def __init__(self, token: str | None = None, *, serving: bool = True) -> None:
        super().__init__()
        if token is not None:
            self.token = token
        self.base_url = ""
        self.base_file_url = ""
        self._failures: dict[str, deque[dict[str, Any]]] = defaultdict(deque)  # scripted next answers
        self.polling_conflict = False
        # Telegram serves one getUpdates at a time: a newer call ends the one still waiting with
        # 409 ("terminated by other getUpdates request"), as when two daemons poll one bot.
        self.poll_generation = 0
        self.conflicts = 0
        self._rejected_status: int | None = None
        self._start_serving = serving
        self._sock: socket.socket | None = None
        self._site: web.SockSite | None = None
        self._transports: set[Any] = set()  # asyncio transports of the open connections
        self._runner: web.AppRunner | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "getMe": lambda p: self.bot_user,
            "deleteWebhook": self._delete_webhook,
            "setWebhook": self._set_webhook,
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

    # -- scripted answers --------------------------------------------------------------------

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
            return api_reply({"ok": False, "error_code": status, "description": description})
        method = request.match_info["method"]
        params = await read_params(request)
        self.calls.append((method, params))
        self._notify()
        if self._failures[method]:
            return api_reply(self._failures[method].popleft())
        if method == "getUpdates":
            self.offsets.append(None if params.get("offset") is None else int(params["offset"]))
            if self.polling_conflict:
                return api_reply({"ok": False, "error_code": 409, "description": self.CONFLICT})
            if self.webhook is not None:
                return api_reply({"ok": False, "error_code": 409, "description": self.WEBHOOK_ACTIVE})
            self.poll_generation += 1
            mine = self.poll_generation
            result: Any = await self._get_updates(params, superseded=lambda: self.poll_generation != mine)
            if not self._serving:  # the network dropped during the long poll: no answer arrives
                return web.Response(status=503)
            if self.poll_generation != mine:
                self.conflicts += 1
                return api_reply({"ok": False, "error_code": 409, "description": self.CONFLICT})
            self.handed_out.append([update_id_of(u) for u in result])
        else:
            handler = self._handlers.get(method, self._fallback(method))
            try:
                result = handler(params)
            except BadRequestReason as exc:
                return api_reply({"ok": False, "error_code": 400, "description": exc.description})
        return api_reply({"ok": True, "result": result})


def _reserve_port(port: int) -> socket.socket:
    """A socket bound to 127.0.0.1:port but not listening: it holds the port, connections are refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.setblocking(False)
    return sock
