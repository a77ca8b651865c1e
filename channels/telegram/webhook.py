"""Telegram's webhook mode: Telegram posts each update to an HTTPS address (a reverse proxy passes
it on to this endpoint), instead of the daemon polling for it. Every daemon on a database can
take updates this way, so none stands by. An update is answered 200 once it is stored (or needs
no storing): Telegram posts again what got no 200, and a message seen twice is answered once.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from bot.core.config.channels import TelegramWebhookConfig

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
MAX_UPDATE_BYTES = 1 << 20  # an update is a few KB; a body this large is no update

Accept = Callable[[Any], Awaitable[bool]]  # an update's JSON -> stored (True) or to be posted again


class WebhookReceiver:
    """The HTTP endpoint Telegram posts to; refuses whatever lacks the configured secret token."""

    def __init__(self, config: TelegramWebhookConfig, accept: Accept) -> None:
        self._config = config
        self._accept = accept
        self._runner: web.AppRunner | None = None
        self.port = config.port

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_UPDATE_BYTES)
        app.router.add_post(self._config.path, self._receive)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._config.listen, self._config.port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        log.info("telegram webhook listening on %s:%d%s", self._config.listen, self.port, self._config.path)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _receive(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self._config.secret_token.encode()):
            log.warning("telegram webhook: refused a post without the secret token (from %s)", request.remote)
            return web.Response(status=401)
        try:
            entry = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            return web.Response(status=200)  # not JSON: posting it again would not make it readable
        if await self._accept(entry):
            return web.Response(status=200)
        return web.Response(status=503)  # not stored (stopping, or it took too long): Telegram posts it again
