"""Daemon start-up time and resident memory over a database of 1,000 conversations.

What: the wall time from spawning `python -m bot run --config F` to the READY_LINE
("matebot ready") log line on its stderr, then its resident set (VmRSS from
/proc/<pid>/status) at that moment; then SIGTERM, and the exit status must be 0.

How: a temp dir holds a config (SQLite file there, `llm.provider: offline`, console
disabled, admin API on port 0, timezone UTC) and a database pre-created through the
repositories with `--conversations` (1,000) conversations of 4 messages each. The
daemon runs `--runs` (3) times; ready_s and rss_mb are the medians, each run is listed.
Nothing is reached over the network.

Target: none in the SPEC; recorded to catch regressions (slow imports, eager loading).

Run: `python -m bench.startup [--runs 3]`; one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/startup.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import HostLoad, chat_rows, emit, make_config, quiet_logs, resident_mb, seed_conversation
from bot.app.core import open_core
from bot.llm.tokens import TokenEstimator
from bot.app.daemon import READY_LINE

REPO = Path(__file__).resolve().parent.parent
_SCRUB = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "MATE_CONFIG", "MATE_API_TOKEN",
          "TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN")


def write_config(tmp: Path) -> Path:
    path = tmp / "config.yaml"
    path.write_text(
        "mate:\n"
        "  timezone: UTC\n"
        f"  database:\n    path: {tmp / 'mate.db'}\n"
        "  llm:\n    provider: offline\n"
        "  channels:\n    console:\n      enabled: false\n"
        "  api:\n    port: 0\n"
        f"  log:\n    file: {tmp / 'matebot.log'}\n",
        encoding="utf-8",
    )
    return path


async def seed_database(tmp: Path, conversations: int, messages: int, seed: int = 3) -> None:
    rng = random.Random(seed)
    tokens = TokenEstimator()
    async with open_core(make_config(tmp)) as core:
        for i in range(conversations):
            await seed_conversation(core.repos, f"web:startup-{i}",
                                    rows=chat_rows(messages, rng, tokens.count_text))


def start_once(config: Path, timeout: float) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "bot", "run", "--config", str(config)], cwd=REPO, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    ready = threading.Event()
    ready_at: list[float] = []
    tail: list[str] = []

    def read_stderr() -> None:  # keeps reading after ready so the pipe never fills
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line.rstrip())
            del tail[:-20]
            if not ready.is_set() and READY_LINE in line:
                ready_at.append(time.perf_counter())
                ready.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        if not ready.wait(timeout):
            raise RuntimeError(f"no '{READY_LINE}' within {timeout} s; stderr tail:\n" + "\n".join(tail))
        rss = resident_mb(proc.pid)
        stop = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout)
        stopped = time.perf_counter()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(5)
        if proc.stderr is not None:
            proc.stderr.close()
    if code != 0:
        raise RuntimeError(f"the daemon exited {code} after SIGTERM; stderr tail:\n" + "\n".join(tail))
    return {"ready_s": round(ready_at[0] - started, 3), "rss_mb": rss, "stop_s": round(stopped - stop, 3),
            "exit_code": code}


def run_startup(
    *, conversations: int = 1000, messages: int = 4, runs: int = 3, timeout: float = 60.0,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="matebot-bench-") as name:
        tmp = Path(name)
        seeding = time.perf_counter()
        asyncio.run(seed_database(tmp, conversations, messages))
        seed_s = time.perf_counter() - seeding
        config = write_config(tmp)
        results = [start_once(config, timeout) for _ in range(runs)]
    return {
        "bench": "startup",
        "ready_s": round(statistics.median(r["ready_s"] for r in results), 3),
        "rss_mb": round(statistics.median(r["rss_mb"] for r in results), 1),
        "conversations": conversations,
        "messages_per_conversation": messages,
        "runs": results,
        "exit_codes": sorted({r["exit_code"] for r in results}),
        "seed_s": round(seed_s, 2),
        "command": "python -m bot run --config F (offline LLM, console off, API on port 0)",
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="bench.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    return emit(run_startup(conversations=args.conversations, messages=args.messages, runs=args.runs,
                            timeout=args.timeout), load)


if __name__ == "__main__":
    main()
