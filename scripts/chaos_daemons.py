"""Chaos: several matebot daemons on one PostgreSQL database, one Telegram bot, a daemon killed
(SIGKILL) every few seconds and started again. Prints one JSON line of what people saw.

    python scripts/chaos_daemons.py [--daemons 3] [--messages 1000] [--chats 20] [--kill-every 10]

What runs: Debian's PostgreSQL in a throwaway cluster; the fake Bot API and the fake Messages API
of tests/ in this process (a scripted model: it answers each message naming its token, sets a
reminder when asked, and its memory extraction notes every token it reads); N daemons as
`python -m bot run --config …` processes, each with its own data folder, all on the one database.
Messages are pushed at a steady pace from `--chats` private chats; one per chat asks for a
reminder in a minute. Every `--kill-every` seconds a random daemon is killed with SIGKILL and
started again at once; the killing stops when every message was pushed, then the run waits
for the answers, the reminders and the memory work to finish.

Counted from what the fakes saw: messages answered exactly once, twice or more, never;
reminders delivered once, twice, never; tokens missing from the memory files at the end
(a memory write lost); the longest time no daemon polled the bot (takeover after a kill).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.storage import PostgresDatabase, Repositories
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, ToolUseReply
from tests.support.fakes.anthropic import system_text
from tests.support.fakes.telegram import FakeTelegram
from tests.support.daemon_process import free_port
from tests.support.postgres import throwaway_cluster
from tests.support.storage_backends import fresh_database

_TOKEN = re.compile(r"\bm(\d+)-(\d+)\b")
_REMINDER = re.compile(r"\bR(\d+)\b")
_EXTRACTION_MARK = "You maintain the long-term memory of a chat assistant"
USER_BASE = 1000


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


class ScriptedModel:
    """Answers as the run needs: each message's token in its reply, reminders, memory notes."""

    def respond(self, request: RecordedRequest) -> Script:
        body = request.body
        system = system_text(body)
        messages = body.get("messages") or []
        first = _text(messages[0].get("content")) if messages else ""
        if _EXTRACTION_MARK in system or _EXTRACTION_MARK in first:
            found = sorted(set(_TOKEN.findall(first)))
            entry = "\n".join(f"- said m{c}-{n}" for c, n in found)
            return TextReply(json.dumps({"should_update": bool(found), "reason": "tokens", "daily_entry": entry,
                                         "memory_update": "", "profile_update": ""}))
        last = messages[-1] if messages else {}
        content = last.get("content")
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            asked = [_TOKEN.findall(_text(m.get("content"))) for m in messages if m.get("role") == "user"]
            token = next((found[-1] for found in reversed(asked) if found), None)
            return TextReply(f"noted m{token[0]}-{token[1]}, the reminder is set" if token else "the reminder is set")
        said = _text(content)
        if reminder := _REMINDER.search(said):
            if "remind me" in said:
                return ToolUseReply("schedule_task", {"message": f"say DUE R{reminder.group(1)}", "in_minutes": 1})
            return TextReply(f"DUE R{reminder.group(1)}")
        tokens = _TOKEN.findall(said)
        return TextReply(f"noted m{tokens[-1][0]}-{tokens[-1][1]}" if tokens else "noted")


WEBHOOK_SECRET = "chaos_secret"


def _config(folder: Path, url: str, tg: FakeTelegram, llm: FakeAnthropic, chats: int, webhook_port: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    webhook = (f"""
      webhook:
        url: https://bot.example.org/telegram
        port: {webhook_port}
        secret-token: {WEBHOOK_SECRET}""" if webhook_port else "")
    users = ", ".join(f'"{USER_BASE + c}"' for c in range(chats))
    path = folder / "config.yaml"
    path.write_text(f"""mate:
  timezone: UTC
  database:
    path: {folder / "mate.db"}
  storage:
    url: {url}
  log:
    file: {folder / "matebot.log"}
    level: info
  api:
    enabled: false
  llm:
    provider: anthropic
    api-key: sk-chaos
    base-url: {llm.url}
    max-retries: 2
  memory:
    idle-minutes: 0
    cooldown-minutes: 0
  channels:
    telegram:
      enabled: true
      token: "{tg.token}"
      base-url: {tg.base_url}
      allowed-users: [{users}]{webhook}
""", encoding="utf-8")
    return path


class WebhookPoster:
    """Posts each update to one of the daemons, as a reverse proxy in front of them would, and again
    (to another) until one answers 200, as Telegram does."""

    def __init__(self, ports: list[int]) -> None:
        self._ports = ports
        self._tasks: set[asyncio.Task[None]] = set()
        self._next = 0

    def post(self, update: dict[str, Any]) -> None:
        task = asyncio.create_task(self._deliver(update))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, update: dict[str, Any]) -> None:
        import aiohttp

        headers = {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            while True:
                port = self._ports[self._next % len(self._ports)]
                self._next += 1
                try:
                    async with session.post(f"http://127.0.0.1:{port}/telegram", json=update,
                                            headers=headers) as response:
                        if response.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.5)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.wait(set(self._tasks))


class Daemons:
    def __init__(self, configs: list[Path]) -> None:
        self.configs = configs
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * len(configs)
        self.kills = 0

    def start(self, index: int) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.processes[index] = subprocess.Popen(
            [sys.executable, "-m", "bot", "run", "--config", str(self.configs[index])], cwd=str(ROOT),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

    def kill(self, index: int) -> None:
        process = self.processes[index]
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
            self.kills += 1

    def stop_all(self) -> None:
        for process in self.processes:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            if process is not None:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    model = ScriptedModel()
    keep = os.environ.get("CHAOS_KEEP")  # a folder to keep the daemons' data and logs in
    with throwaway_cluster() as cluster, TemporaryDirectory(prefix="matebot-chaos-") as scratch:
        tmp = keep or scratch
        # The run reads the database as matebot does: through its repositories (the schema made now).
        async with fresh_database(cluster) as url, PostgresDatabase(url, pool_size=2) as database, \
                FakeAnthropic() as llm, FakeTelegram() as tg:
            repos = Repositories.over(database)
            llm.responder = model.respond
            ports = [free_port() if args.webhook else 0 for _ in range(args.daemons)]
            configs = [_config(Path(tmp) / f"daemon{i}", url, tg, llm, args.chats, ports[i]) for i in range(args.daemons)]
            poster = WebhookPoster(ports) if args.webhook else None
            daemons = Daemons(configs)
            for index in range(args.daemons):
                daemons.start(index)
            started = time.monotonic()
            polls: list[float] = []
            tg_calls_seen = 0

            def watch_polls() -> None:
                nonlocal tg_calls_seen
                for method, _ in tg.calls[tg_calls_seen:]:
                    if method == "getUpdates":
                        polls.append(time.monotonic())
                tg_calls_seen = len(tg.calls)

            takeovers = await _takeovers(args.takeovers, repos, configs, daemons, tg) if args.takeovers else []
            reminder_at = {c: rng.randrange(args.messages // args.chats) for c in range(args.chats)}
            plan = [(c, n) for n in range(args.messages // args.chats) for c in range(args.chats)]
            pace = args.duration / max(len(plan), 1)
            next_kill = time.monotonic() + args.kill_every
            for c, n in plan:
                text = f"remind me in a minute R{c} (m{c}-{n})" if reminder_at[c] == n else f"hello m{c}-{n}"
                update = tg.push_text(text, chat_id=USER_BASE + c, user_id=USER_BASE + c, first_name=f"P{c}",
                                      username=f"p{c}")
                if poster is not None:  # as Telegram would: to the proxy in front of the daemons
                    poster.post(update)
                if pace > 0:
                    await asyncio.sleep(pace)
                watch_polls()
                if args.kill_every > 0 and time.monotonic() >= next_kill:
                    victim = rng.randrange(args.daemons)
                    daemons.kill(victim)
                    daemons.start(victim)
                    next_kill += args.kill_every
            pushed_s = time.monotonic() - started
            if poster is not None:
                await poster.drain()
            tokens = {f"m{c}-{n}" for c, n in plan}

            def replies() -> Counter[str]:
                return Counter(match for sent in tg.sent for match in re.findall(r"\bm\d+-\d+\b", sent.get("text", ""))
                               if sent.get("text", "").startswith("noted"))

            def due() -> Counter[str]:
                return Counter(m for sent in tg.sent for m in re.findall(r"\bDUE (R\d+)\b", sent.get("text", "")))

            deadline = time.monotonic() + args.settle
            all_answered: float | None = None
            while time.monotonic() < deadline:
                watch_polls()
                done = set(replies()) >= tokens
                if done and all_answered is None:
                    all_answered = time.monotonic() - started
                if done and len(due()) >= args.chats:
                    break
                await asyncio.sleep(0.2)
            # The memory work: every conversation's tokens in its agent's notes once the queue is empty.
            while time.monotonic() < deadline and await repos.memory_pending.all():
                await asyncio.sleep(1.0)
            notes = "\n".join([f.content for agent in await repos.agents.list()
                               for f in await repos.workspace_files.list(agent.id, "memory/")])
            stored = sum([await repos.messages.count(a.conversation.id, roles=("user",))
                          for a in await repos.conversations.recent_activity(None)])
            daemons.stop_all()
            if os.environ.get("CHAOS_DEBUG"):
                Path(os.environ["CHAOS_DEBUG"]).write_text(json.dumps(
                    {"sent": tg.sent, "asked": [r.body.get("messages", [])[-1:] for r in llm.requests]}, default=str))
            answered, reminders = replies(), due()
            expected = tokens
            in_notes = set(re.findall(r"\bm\d+-\d+\b", notes))
            gaps = [b - a for a, b in zip(polls, polls[1:])]
            return {
                "script": "chaos_daemons", "mode": "webhook" if args.webhook else "polling", "daemons": args.daemons, "messages": len(plan), "chats": args.chats,
                "kills": daemons.kills, "pushed_in_s": round(pushed_s, 1),
                "answered_exactly_once": sum(1 for t in expected if answered[t] == 1),
                "answered_twice_or_more": sum(1 for t in expected if answered[t] > 1),
                "never_answered": sum(1 for t in expected if answered[t] == 0),
                "user_messages_stored": stored,
                "reminders_asked": args.chats,
                "reminders_once": sum(1 for c in range(args.chats) if reminders[f"R{c}"] == 1),
                "reminders_twice_or_more": sum(1 for c in range(args.chats) if reminders[f"R{c}"] > 1),
                "reminders_lost": sum(1 for c in range(args.chats) if reminders[f"R{c}"] == 0),
                "memory_tokens_missing": len(tokens - in_notes),
                "longest_without_polling_s": round(max(gaps, default=0.0), 1),
                "all_answered_after_s": round(all_answered, 1) if all_answered is not None else None,
                "messages_per_s": round(len(plan) / all_answered, 2) if all_answered else None,
                "telegram_409": tg.conflicts,
                "takeover_s": takeovers,
                "seconds": round(time.monotonic() - started, 1),
            }


async def _takeovers(count: int, repos: Repositories, configs: list[Path], daemons: Daemons,
                     tg: FakeTelegram) -> list[float]:
    """Kill the daemon that polls, and time until another one polls; it is started again after."""
    times: list[float] = []
    for _ in range(count):
        holders: dict[str, str] = {}
        for _ in range(600):  # the first daemon to start takes the lease within seconds
            holders = await repos.leases.held("telegram:", datetime.now(timezone.utc))
            if holders:
                break
            await asyncio.sleep(0.1)
        assert holders, "no daemon took the bot's lease"
        holder = next(iter(holders.values()))
        victim = next(i for i, config in enumerate(configs) if holder.endswith(str(config.parent)))
        daemons.kill(victim)
        killed, calls = time.monotonic(), len(tg.calls)
        while not any(method == "getUpdates" for method, _ in tg.calls[calls:]):
            await asyncio.sleep(0.1)
        times.append(round(time.monotonic() - killed, 1))
        daemons.start(victim)
        await asyncio.sleep(3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemons", type=int, default=3)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--kill-every", type=float, default=10.0, help="seconds between kills; 0: no kills")
    parser.add_argument("--duration", type=float, default=200.0, help="seconds over which the messages are pushed (0: all at once, for messages/s)")
    parser.add_argument("--settle", type=float, default=300.0, help="most seconds to wait for the answers after")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--webhook", action="store_true",
                        help="Telegram's webhook mode: every daemon takes updates (posted round-robin)")
    parser.add_argument("--takeovers", type=int, default=0,
                        help="first kill the polling daemon this many times, timing until another one polls")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()
