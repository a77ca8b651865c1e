"""A real-model check of reminders: does "remind me in two minutes to stretch" become a task due in ~2 minutes?

Usage: scripts/real-reminder-check [CACHE_DIR] [--text TEXT] [--runs N] [--threads N] [--temp T] [--keep]

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

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a file: bot.* and memory.* come from the project
    sys.path.insert(0, str(ROOT))

from bot.core.clock import parse_iso, utc_now
from bot.core.config import parse_config
from bot.llm import AnthropicClient
from bot.app.runtime import open_runtime
from bot.storage.tasks import ChatRef
from channels.base import InboundMessage
from real_lane import (
    Lane, RecordingClient, add_keep, free_port, lane_parser, print_result, run_lane, say, write_exchanges,
)
from real_llama import MODEL_NAME, daemon_config, llama_arguments, serve_in_process
from recording_proxy import RecordingProxy
from reply_checks import claimed_action, markup_in
from turn_audit import claim_done

TEXT = "remind me in two minutes to stretch"
EXPECTED_S = 120
WINDOW = (60, 300)


async def run_check(text: str, base_url: str, work: Path, dump: Path) -> dict[str, Any]:
    async with RecordingProxy(base_url) as proxy:
        result = await _run_check(text, proxy.url, work, dump)
    return {**result, **proxy.summary()}


async def _run_check(text: str, base_url: str, work: Path, dump: Path) -> dict[str, Any]:
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
    shown = reply.text if reply else ""
    claimed = claimed_action(shown)
    # What ran: each schedule_task that made a task, and the other tools called.
    ran = [*("schedule_task" for a in attempts if "task_id" in a),
           *(call["name"] for call in calls if call["name"] != "schedule_task")]
    return {
        "called_schedule_task": bool(schedule_calls),
        "valid": task is not None,
        "due_in_seconds": None if due is None else round(due, 1),
        "within_window": due is not None and WINDOW[0] <= due <= WINDOW[1],
        "reply": shown[:200],
        "reply_markup": markup_in(shown),
        "claimed": claimed,
        "claimed_not_done": claimed is not None and not claim_done(claimed, ran, []),
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
    header = f"# real-reminder-check: {text!r}\n\nreply: {reply!r}\n\ntasks: {[repr(t) for t in tasks]}"
    write_exchanges(path, header, exchanges, tool_calls=True)


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals over every run, in the terms of SPEC S34's targets ("in two minutes" right in 2 of 3)."""
    right = sum(bool(r.get("within_window")) for r in results)
    markup = sum(bool(r.get("reply_markup")) for r in results)
    false_claims = sum(bool(r.get("claimed_not_done")) for r in results)
    return {"summary": "real-reminder-check", "runs": len(results), "reminders_right": f"{right}/{len(results)}",
            "replies_with_markup": markup, "actions_claimed_not_done": false_claims,
            "extraction_prompts_repeated": sum(int(r.get("extraction_prompts_repeated") or 0) for r in results),
            "targets_met": {"reminders_two_thirds": right * 3 >= len(results) * 2, "replies_with_markup_0": markup == 0,
                            "actions_claimed_not_done_0": false_claims == 0}}


def main(argv: list[str] | None = None) -> int:
    parser = lane_parser("scripts/real-reminder-check", __doc__)
    parser.add_argument("--text", default=TEXT, help=f"the console message (default {TEXT!r})")
    parser.add_argument("--runs", type=int, default=1,
                        help="checks, each on a fresh database; with more than one, a summary line follows "
                             "(default 1)")
    llama_arguments(parser)
    add_keep(parser)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    def check(lane: Lane) -> None:
        base_url, server = serve_in_process(lane, args.threads, args.temp)
        dump = lane.logs / "last-reminder.md"
        results: list[dict[str, Any]] = []
        for run in range(1, args.runs + 1):
            work = lane.work if args.runs == 1 else lane.work / f"run-{run}"
            result = asyncio.run(run_check(args.text, base_url, work, dump))
            result.update(server, run=run)
            print_result(result, default=str)
            results.append(result)
            say(f"prompts and replies in {dump}")
        if len(results) > 1:
            print_result(summary(results))

    return run_lane(args.cache_dir, "matebot-real-reminder-", check, keep=args.keep, in_process=True,
                    last_logs=lambda work: [(log, f"last-reminder-{log.name}") for log in (work / "logs").glob("*")])


if __name__ == "__main__":
    sys.exit(main())
