"""A loopback port for the fake Discord that can refuse connections: late start, outage, recovery."""

from __future__ import annotations

import socket

from aiohttp import web


class LoopbackListener:
    """Reserves a port on 127.0.0.1 from the start; it accepts connections only while `up`.

    While down, the port is bound but not listening, so a client's connect is refused at once
    (ECONNREFUSED), as when a host is unreachable, and nobody else can take the port meanwhile.
    """

    def __init__(self, runner: web.AppRunner) -> None:
        self._runner = runner
        self._sock = _bind(0)
        self.port: int = self._sock.getsockname()[1]
        self._site: web.SockSite | None = None

    @property
    def up(self) -> bool:
        return self._site is not None

    async def listen(self) -> None:
        if self._site is not None:
            return
        site = web.SockSite(self._runner, self._sock)
        await site.start()
        self._site = site

    async def cut(self) -> None:
        """Stop accepting, then abort every open connection (websockets included) without a close frame."""
        if self._site is not None:
            await self._site.stop()  # closes the listening socket
            self._site = None
            self._sock = _bind(self.port)
        server = self._runner.server
        for connection in server.connections if server is not None else []:
            if connection.transport is not None:
                connection.transport.abort()

    def close(self) -> None:
        """Release the reserved port; the runner's cleanup stops a listening site itself."""
        if self._site is None:
            self._sock.close()


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # rebind while old connections linger
    sock.bind(("127.0.0.1", port))
    return sock
