"""The daemon in this process with a fake Telegram and a fake model, for the memory-trust tests."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.app.daemon import run_daemon
from bot.core.prompts import PromptLibrary
from bot.app.runtime import Runtime
from bot.app.services import Services
from tests.support.eventually import eventually
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, is_memory_request
from tests.support.fakes.telegram import FakeTelegram

OWNER, FRIEND = 42, 7
POLL = 0.02


def transcript_user_lines(recorded: RecordedRequest) -> list[str]:
    """The user lines of an extraction request's transcript, without their prefix and time label."""
    content = recorded.body["messages"][0]["content"]
    text = content if isinstance(content, str) else " ".join(block.get("text", "") for block in content)
    inside = text.split("<transcript>", 1)[-1].split("</transcript>", 1)[0]
    return [re.sub(r"^\[[^\]]*\] ", "", line[len("User: "):]) for line in inside.splitlines()
            if line.startswith("User: ")]


@dataclass
class Trust:
    """The running daemon: say things in a Telegram chat, read what was sent back."""

    rt: Runtime
    services: Services
    llm: FakeAnthropic
    tg: FakeTelegram
    prompts: PromptLibrary
    # What the next extractions answer (popped in order); when empty: nothing worth keeping.
    memory_replies: list[dict[str, Any]] = field(default_factory=list)
    chat_replies: list[Script] = field(default_factory=list)  # the next chat answers (then "ok")

    def sent(self, chat: int = OWNER) -> list[str]:
        return [str(s["text"]) for s in self.tg.sent if int(s["chat_id"]) == chat]

    async def say(self, text: str, chat: int = OWNER, *, answers: int = 1) -> str:
        """Send `text` in the chat and wait for `answers` messages back; the last of them."""
        before = len(self.sent(chat))
        self.tg.push_text(text, chat_id=chat, user_id=chat)
        await self.until(lambda: len(self.sent(chat)) >= before + answers, f"an answer to {text!r}")
        return self.sent(chat)[before + answers - 1]

    def receipts(self, chat: int = OWNER) -> list[str]:
        undo = self.prompts.text("receipt_undo")
        return [text for text in self.sent(chat) if text.endswith(undo) and "\n" in text]

    def memory_requests(self) -> list[RecordedRequest]:
        return [r for r in self.llm.requests if r.path == "/v1/messages" and is_memory_request(r)]

    async def file(self, filename: str, agent_id: int = 1) -> str:
        return (await self.rt.core.workspace.read_text(agent_id, filename))[0]

    @staticmethod
    async def until(condition: Any, what: str, timeout: float = 20.0) -> None:
        await eventually(condition, what, timeout, poll=POLL)

    async def settled(self, extractions: int) -> None:
        """The model was asked for `extractions` extractions in all, and the memory work is done."""
        await self.until(lambda: len(self.memory_requests()) >= extractions, f"{extractions} extraction requests")
        assert self.rt.memory_services is not None
        assert await self.rt.memory_services.worker.drain(20)


@asynccontextmanager
async def running_bot(tmp_path: Path, locale: str = "en", **memory: Any) -> AsyncIterator[Trust]:
    async with FakeAnthropic() as llm, FakeTelegram() as tg:
        config = make_config(
            tmp_path, locale=locale,
            llm={"api-key": "k", "base-url": llm.url, "max-retries": 0, "stream": False},
            api={"port": 0},
            memory={"cooldown-minutes": 0, "min-messages-for-summarize": 0, "min-user-message-length": 0,
                    **memory},
            channels={"telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url,
                                   "admins": [str(OWNER)], "allowed-users": [str(FRIEND)],
                                   "allowed-groups": ["-100"]},
                      "console": {"enabled": False}},
        )
        stop = asyncio.Event()
        started: list[tuple[Runtime, Services]] = []
        daemon = asyncio.create_task(run_daemon(config, stop=stop, console=False,
                                                ready=lambda rt, services: started.append((rt, services))))
        try:
            await Trust.until(lambda: bool(started) or daemon.done(), "the daemon to start", 30)
            assert started, daemon.result()
            rt, services = started[0]
            bot = Trust(rt, services, llm, tg, PromptLibrary(locale))

            def respond(recorded: RecordedRequest) -> Script | None:
                if recorded.path != "/v1/messages":
                    return None
                if "memory_content" in json.dumps(recorded.body.get("system", "")):  # a consolidation
                    return TextReply(json.dumps({"should_update": True, "reason": "folded the week's notes",
                                                 "memory_content": "", **bot.memory_replies.pop(0)}))
                if is_memory_request(recorded):
                    if not bot.memory_replies:
                        return TextReply(json.dumps({"should_update": False, "reason": "nothing new",
                                                     "daily_entry": "", "memory_update": "", "profile_update": ""}))
                    reply = {"reason": "new facts", "daily_entry": "", "memory_update": "", "profile_update": "",
                             **bot.memory_replies.pop(0)}
                    if reply.get("daily_entry") == "ECHO":  # the transcript's user lines, as the day's entry
                        reply["daily_entry"] = "\n".join(f"- {line}" for line in transcript_user_lines(recorded))
                    return TextReply(json.dumps({"should_update": True, **reply}))
                return bot.chat_replies.pop(0) if bot.chat_replies else TextReply("ok")

            llm.responder = respond
            yield bot
        finally:
            stop.set()
            assert await asyncio.wait_for(daemon, 30) == 0
