"""The admin API of the real runtime on a loopback port, the model the fake Messages API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bot.app.api.server import ApiServer
from bot.app.runtime import Runtime
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.runtime import running

# Two agents and a person, for the pages and routes that name an agent.
TWO_AGENTS: dict[str, Any] = {
    "agents": [{"id": 1, "name": "Mate"}, {"id": 2, "name": "Buddy"}],
    "people": [{"name": "Alice", "ids": ["telegram:111"]}],
    "channels": {"telegram": {"admins": ["999"]}},
}


@dataclass
class Api:
    url: str
    rt: Runtime
    fake: FakeAnthropic
    http: aiohttp.ClientSession
    token: str

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def call(self, method: str, path: str, **kwargs: object) -> tuple[int, dict]:
        headers = {**self.auth(), **kwargs.pop("headers", {})}  # type: ignore[dict-item]
        async with self.http.request(method, self.url + path, headers=headers, **kwargs) as response:
            return response.status, await response.json()


async def open_api(tmp_path: Path, token: str = "", llm_retries: int = 0, **mate: object) -> AsyncIterator[Api]:
    async with FakeAnthropic() as fake, running(
        tmp_path, fake, memory_worker=True, api={"port": 0, "token": token},
        llm={"api-key": "test-key", "base-url": fake.url, "max-retries": llm_retries}, **mate,
    ) as rt, ApiServer(rt, rt.core.config.mate.api) as server, aiohttp.ClientSession() as http:
        yield Api(f"http://127.0.0.1:{server.port}", rt, fake, http, token)

