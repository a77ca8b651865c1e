"""A real-model check of reminders: does "remind me in two minutes to stretch" become a task due in ~2 minutes?

Usage: scripts/real-reminder-check [CACHE_DIR] [--text TEXT] [--threads N] [--temp T] [--keep]

1. Reuses scripts/real-model-check's llama-server build and Qwen2.5-Coder-1.5B weights
   under CACHE_DIR (building and downloading them first when they are not there yet).
2. Opens matebot's runtime on a fresh database with llama-server as its model and routes one
   console message (the console user is the owner, who may schedule, so schedule_task,
   list_tasks and cancel_task are offered).
3. Reads the chat's stored tasks and prints one JSON line: called_schedule_task, valid (a task
   exists), due_in_seconds (from when the message was sent, the time the model is given, to the
   task's next run; due_after_reply_seconds counts from the end of the turn), within_window
   (60 <= due_in_seconds <= 300), reply,
   seconds, model (and details). The prompts and the model's replies go to
   CACHE_DIR/logs/last-reminder.md. Exit 1 only when something could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a file: bot.* and memory.* come from the project
    sys.path.insert(0, str(ROOT))

from bot.clock import parse_iso, utc_now  # noqa: E402
from bot.config import parse_config  # noqa: E402
from bot.llm import AnthropicClient, LLMClient, LLMRequest, LLMResponse, TextListener  # noqa: E402
from bot.runtime import open_runtime  # noqa: E402
from bot.storage.tasks import ChatRef  # noqa: E402
from channels.base import InboundMessage  # noqa: E402
from real_model_check import (  # noqa: E402  (a sibling script: found next to this file)
    CONTEXT, MODEL_NAME, CheckError, Processes, daemon_config, free_port, prepare, runtime_label, say, start_llama,
)

TEXT = "remind me in two minutes to stretch"
EXPECTED_S = 120
WINDOW = (60, 300)


class RecordingClient:
    """The model client, keeping each request's prompt, the reply's text and its tool calls."""

    def __init__(self, inner: LLMClient) -> None:
        self._inner = inner
        self.exchanges: list[dict[str, Any]] = []

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


async def run_check(text: str, base_url: str, work: Path, dump: Path) -> dict[str, Any]:
    tree = daemon_config(work, base_url, free_port())
    tree["mate"]["api"] = {"enabled": False}
    config = parse_config(tree, source="real-reminder-check", environ={})
    message = InboundMessage(channel="console", chat_id="me", sender_id="me", sender_name="me", text=text)
    async with AnthropicClient(config.mate.llm) as client:
        recorder = RecordingClient(client)
        async with open_runtime(config, llm=recorder) as rt:
            attempts = watch_schedule(rt.tasks)
            say(f"sending {text!r}")
            sent = utc_now()  # the time the model is told, at the start of the message
            started = time.monotonic()
            reply = await rt.router.handle(message)
            seconds = time.monotonic() - started
            now = utc_now()
            tasks = await rt.core.repos.tasks.in_chat(ChatRef("console", "me"))
    calls = tool_calls(recorder.exchanges)
    schedule_calls = [call for call in calls if call["name"] == "schedule_task"]
    task = tasks[0] if tasks else None
    # On a slow machine the reply takes minutes: "in two minutes" counts from when the message
    # was sent (the time the model is given), so that is the `now` of due_in_seconds; the
    # distance from the end of the turn is given as well.
    due: float | None = None
    due_after_reply: float | None = None
    if task is not None and task.next_run_time:
        next_run = parse_iso(task.next_run_time)
        due = (next_run - sent).total_seconds()
        due_after_reply = (next_run - now).total_seconds()
    write_dump(dump, text, recorder.exchanges, reply.text if reply else None, tasks)
    return {
        "called_schedule_task": bool(schedule_calls),
        "valid": task is not None,
        "due_in_seconds": None if due is None else round(due, 1),
        "within_window": due is not None and WINDOW[0] <= due <= WINDOW[1],
        "reply": (reply.text if reply else "")[:200],
        "seconds": round(seconds, 1),
        "model": MODEL_NAME,
        "due_after_reply_seconds": None if due_after_reply is None else round(due_after_reply, 1),
        "sent": sent.isoformat(timespec="seconds"),
        "next_run_time": task.next_run_time if task else None,
        "tasks": len(tasks),
        "task_message": task.message if task else None,
        "task_cron": task.cron if task else None,
        "schedule_inputs": [call["input"] for call in schedule_calls],
        "schedule_results": attempts,  # what each schedule_task call that ran came to
        "tools_called": [call["name"] for call in calls],
        "model_calls": len(recorder.exchanges),
        "failure": reply.failure if reply else "no reply",
    }


def watch_schedule(service: Any) -> list[dict[str, Any]]:
    """Records each TaskService.schedule call the tools make: its arguments and the task or the error."""
    attempts: list[dict[str, Any]] = []
    inner = service.schedule

    async def schedule(*args: Any, **kwargs: Any) -> Any:
        entry: dict[str, Any] = {k: v for k, v in kwargs.items() if v is not None}
        attempts.append(entry)
        try:
            task = await inner(*args, **kwargs)
        except Exception as exc:
            entry["error"] = str(exc)[:300]
            raise
        entry.update(task_id=task.id, next_run_time=task.next_run_time)
        return task

    service.schedule = schedule
    return attempts


def tool_calls(exchanges: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool call the model made, in order: the native ones in the replies, and the ones written
    as text (turned into tool_use blocks by the agent), which later requests carry in their history."""
    seen: dict[str, dict[str, Any]] = {}
    native: list[dict[str, Any]] = []
    for entry in exchanges:
        for item in entry["messages"]:
            if item["role"] == "assistant" and isinstance(item["content"], list):
                for block in item["content"]:
                    if isinstance(block, dict) and block.get("type") == "tool_use":
                        seen.setdefault(str(block.get("id")), {"name": block.get("name"), "input": block.get("input")})
        native.extend(entry.get("tool_calls", []))
    calls = list(seen.values())
    return calls + [call for call in native if call not in calls]


def write_dump(path: Path, text: str, exchanges: list[dict[str, Any]], reply: str | None, tasks: list[Any]) -> None:
    parts = [f"# real-reminder-check: {text!r}\n\nreply: {reply!r}\n\ntasks: {[repr(t) for t in tasks]}"]
    for n, entry in enumerate(exchanges, 1):
        parts.append(f"\n## model call {n} (max_tokens {entry['max_tokens']})\n\n### system\n\n{entry['system']}")
        for item in entry["messages"]:
            content = item["content"]
            body = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            parts.append(f"\n### {item['role']}\n\n{body}")
        parts.append(f"\n### reply ({entry.get('stop_reason')}, {entry.get('seconds', 0):.1f} s, "
                     f"{entry.get('input_tokens')} in, {entry.get('output_tokens')} out)\n\n"
                     f"{entry.get('reply', entry.get('error', ''))}\n\ntool calls: "
                     f"{json.dumps(entry.get('tool_calls', []), ensure_ascii=False)}")
    with contextlib.suppress(OSError):
        path.write_text("\n".join(parts) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/real-reminder-check",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("cache_dir", nargs="?", default=os.path.expanduser("~/.cache/matebot-real-model"),
                        help="where the llama-server build and the weights are kept (shared with real-model-check)")
    parser.add_argument("--text", default=TEXT, help=f"the console message (default {TEXT!r})")
    parser.add_argument("--threads", type=int, default=2, help="llama-server threads (default 2)")
    parser.add_argument("--temp", type=float, default=None,
                        help="llama-server's sampling temperature for requests that set none (default: the "
                             "server's own, 0.8; 0 answers the same prompt the same way)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder and say where")
    args = parser.parse_args(argv)

    cache = Path(args.cache_dir).expanduser().resolve()
    logs = cache / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs = Processes()

    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    work = Path(tempfile.mkdtemp(prefix="matebot-real-reminder-"))
    run_logs = work / "logs"
    run_logs.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(run_logs / "matebot.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    # The model is on loopback: a proxy from the environment must not stand in between.
    os.environ["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY", ""), "127.0.0.1,localhost"]))
    try:
        binary, template, model, _, _ = prepare(cache, logs)
        options = [] if args.temp is None else ["--temp", str(args.temp)]
        base_url, load_s, _ = start_llama(procs, binary, template, model, args.threads, run_logs, options=options)
        dump = logs / "last-reminder.md"
        result = asyncio.run(run_check(args.text, base_url, work, dump))
        result.update(runtime=" ".join([runtime_label(args.threads, CONTEXT), *options]),
                      server_load_s=round(load_s, 1))
        print(json.dumps(result, ensure_ascii=False, default=str), flush=True)
        say(f"prompts and replies in {dump}")
        return 0
    except CheckError as exc:
        say(f"FAILED: {exc}")
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        procs.stop_all()
        for log in run_logs.glob("*"):
            with contextlib.suppress(OSError):
                shutil.copy2(log, logs / f"last-reminder-{log.name}")
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
