"""A fake model server in a process of its own: `python -m tests.support.fakes.standalone anthropic|openai
[reply text]` (bench/pipeline.py --api runs it so that the bench's CPU figure leaves the fake's out).
Its root URL is the first line on stdout; it answers until stdin closes, then prints how many
requests it answered."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.openai_chat import FakeOpenAIChat


async def serve_stdio(fake: Any) -> None:
    loop = asyncio.get_running_loop()
    async with fake:
        print(fake.url, flush=True)
        closed = loop.run_in_executor(None, sys.stdin.read)
        answered = 0
        while not closed.done():
            await asyncio.wait([closed], timeout=1.0)
            answered += len(fake.requests)
            fake.requests.clear()  # a long run must not hold every prompt it was sent
        print(answered, flush=True)


def main(argv: list[str]) -> None:
    kind, text = argv[0], " ".join(argv[1:]) or "ok"
    fake = FakeAnthropic(default_text=text) if kind == "anthropic" else FakeOpenAIChat(default_text=text)
    asyncio.run(serve_stdio(fake))


if __name__ == "__main__":
    main(sys.argv[1:])
