"""The run scaffolding every scripts/real-*-check lane shares: children, HTTP, progress, exit codes.

A lane's `main` parses its arguments and hands its own work to `run_lane`, which makes the
temporary folder, turns SIGTERM into an interrupt, stops every child on each way out, keeps
the last run's logs in the cache and answers the exit code: 0 when the lane ran, 1 when
something it needs could not be set up (CheckError), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.llm import LLMClient, LLMRequest, LLMResponse, TextListener

ROOT = Path(__file__).resolve().parent.parent
MODEL_CACHE = "~/.cache/matebot-real-model"  # the llama-server build and the weights, for every model lane


def say(message: str, lane: str = "real-model-check") -> None:
    print(f"[{lane} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class CheckError(Exception):
    """Something the check needs could not be set up: exit 1 with this line."""


# -- processes -------------------------------------------------------------------------


class Processes:
    """Children started in their own process group, stopped on every way out."""

    def __init__(self) -> None:
        self._children: list[tuple[str, subprocess.Popen[bytes], float]] = []
        self._lock = threading.Lock()

    def start(self, name: str, argv: list[str], *, log: Path, grace: float = 10.0,
              **kwargs: Any) -> subprocess.Popen[bytes]:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, **kwargs)
        with self._lock:
            self._children.append((name, proc, grace))
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> int | None:
        with self._lock:
            entry = next((e for e in self._children if e[1] is proc), None)
            if entry is not None:
                self._children.remove(entry)
        name, _, grace = entry if entry else ("process", proc, 10.0)
        if proc.poll() is None:
            say(f"stopping {name} (pid {proc.pid})")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                say(f"{name} did not stop within {grace:.0f} s: killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode

    def stop_all(self) -> None:
        with self._lock:
            children = list(reversed(self._children))
        for _, proc, _ in children:
            self.stop(proc)


def run_logged(argv: list[str], log: Path, **kwargs: Any) -> None:
    """Run to completion with output appended to `log`; CheckError naming the log on failure."""
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        code = subprocess.call(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, **kwargs)
    if code != 0:
        raise CheckError(f"`{' '.join(argv[:4])} ...` failed with exit code {code}; see {log}")


# -- HTTP on loopback ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(method: str, url: str, body: Any = None, *, token: str | None = None,
         timeout: float = 10.0) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw, status = response.read(), response.status
    except urllib.error.HTTPError as error:
        raw, status = error.read(), error.code
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw.decode(errors="replace")


def wait_healthy(proc: subprocess.Popen[bytes], name: str, url: str, *, timeout: float, see: Path,
                 poll: float = 0.5, request_timeout: float = 5.0) -> float:
    """Seconds until `url` answers 200; CheckError naming `see` when `proc` exits or time runs out."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise CheckError(f"{name} exited with code {proc.returncode}; see {see}")
        with contextlib.suppress(OSError, ValueError):
            status, _ = http("GET", url, timeout=request_timeout)
            if status == 200:
                return time.monotonic() - started
        time.sleep(poll)
    path = urllib.parse.urlsplit(url).path
    raise CheckError(f"{name} did not answer {path} within {timeout:.0f} s; see {see}")


# -- one run ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lane:
    """What a lane's work gets: the cache and its logs, a temporary folder, the children."""
    cache: Path
    logs: Path  # cache/logs: kept between runs
    work: Path  # removed at the end unless --keep
    procs: Processes


LastLogs = Callable[[Path], Iterable[tuple[Path, str]]]  # work folder -> (log, its name in cache/logs)


def run_lane(cache_dir: str, prefix: str, work: Callable[[Lane], None], *, keep: bool,
             last_logs: LastLogs | None = None, in_process: bool = False,
             report: Callable[[str], None] = say) -> int:
    """Run `work` in a fresh temporary folder (named `prefix`...) and answer the lane's exit code.

    `in_process`: matebot's runtime runs in this process, logging to work/logs/matebot.log and
    reaching the model on loopback past any proxy from the environment.
    """
    cache = Path(cache_dir).expanduser().resolve()
    logs = cache / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs = Processes()

    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if in_process:
        log_in_process(folder / "logs")
    try:
        work(Lane(cache, logs, folder, procs))
        return 0
    except CheckError as exc:
        report(f"FAILED: {exc}")
        return 1
    except KeyboardInterrupt:
        report("interrupted")
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        procs.stop_all()
        for log, name in last_logs(folder) if last_logs else ():
            with contextlib.suppress(OSError):
                shutil.copy2(log, logs / name)
        if keep:
            report(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def log_in_process(run_logs: Path) -> None:
    run_logs.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(run_logs / "matebot.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    # The model is on loopback: a proxy from the environment must not stand in between.
    os.environ["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY", ""), "127.0.0.1,localhost"]))


def print_result(result: dict[str, Any], **extra: Any) -> None:
    """The lane's one JSON line on stdout."""
    print(json.dumps(result, ensure_ascii=False, **extra), flush=True)


# -- arguments -------------------------------------------------------------------------


def lane_parser(prog: str, doc: str | None, cache: str = MODEL_CACHE,
                cache_help: str = "where the llama-server build and the weights are kept "
                                  "(shared with real-model-check)") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n\n")[0])
    parser.add_argument("cache_dir", nargs="?", default=os.path.expanduser(cache), help=cache_help)
    return parser


def add_keep(parser: argparse.ArgumentParser, what: str = "data folder") -> None:
    parser.add_argument("--keep", action="store_true", help=f"keep the temporary {what} and say where")


# -- in-process model calls ------------------------------------------------------------


class RecordingClient:
    """The model client, keeping each request's prompt, the reply's text and its tool calls."""

    def __init__(self, inner: LLMClient) -> None:
        self._inner = inner
        self.exchanges: list[dict[str, Any]] = []

    @property
    def inner(self) -> LLMClient:
        return self._inner

    async def complete(self, request: LLMRequest, on_text: TextListener | None = None) -> LLMResponse:
        entry: dict[str, Any] = {"system": request.system, "messages": request.messages,
                                 "max_tokens": request.max_tokens}
        self.exchanges.append(entry)
        started = time.monotonic()
        try:
            response = await self._inner.complete(request, on_text)
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            raise
        entry.update(reply=response.text, stop_reason=response.stop_reason, seconds=time.monotonic() - started,
                     input_tokens=response.prompt_tokens, output_tokens=response.output_tokens,
                     tool_calls=[{"name": c.name, "input": c.input} for c in response.tool_calls])
        return response


def write_exchanges(path: Path, header: str, exchanges: list[dict[str, Any]], *, tool_calls: bool = False,
                    files: Iterable[tuple[str, str]] = ()) -> None:
    """The whole story of a run (`header`, each model call, the files written), for a look after a bad one."""
    parts = [header]
    for n, entry in enumerate(exchanges, 1):
        parts.append(f"\n## model call {n} (max_tokens {entry['max_tokens']})\n\n### system\n\n{entry['system']}")
        for message in entry["messages"]:
            content = message["content"]
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            parts.append(f"\n### {message['role']}\n\n{text}")
        calls = (f"\n\ntool calls: {json.dumps(entry.get('tool_calls', []), ensure_ascii=False)}"
                 if tool_calls else "")
        parts.append(f"\n### reply ({entry.get('stop_reason')}, {entry.get('seconds', 0):.1f} s, "
                     f"{entry.get('input_tokens')} in, {entry.get('output_tokens')} out)\n\n"
                     f"{entry.get('reply', entry.get('error', ''))}{calls}")
    for name, text in files:
        parts.append(f"\n## file {name}\n\n{text}")
    with contextlib.suppress(OSError):
        path.write_text("\n".join(parts) + "\n")
