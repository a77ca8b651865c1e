"""What adding an entry to a daily note costs, as the note grows to its daily size cap.

What: a day's note filled from empty to `daily-note-max-chars` (20 000) with entries of
`--entry-chars` (300) characters, each written the way a memory extraction writes it
(MemoryCommitRepository.commit: the entry appended in SQL, the file's history, the
conversation's watermark and the run row in one transaction), on a SQLite file in a tmp
dir with the real schema and its search triggers. Per append: the time of the commit
(`p50_ms`, `p95_ms`, and `last_ms` for the appends to a note over 15 000 characters) and how
many characters went into the search index (`indexed_chars_per_append`: the entry's, where
indexing the note again would be the whole note's, `note_chars` at the end).

Measured when appends stopped rewriting the note (66 appends to the cap; a host with a load
of ~3 from other work; two runs each, back to back): p50 1.96-2.14 ms, over 15 000 characters
1.77-2.05 ms, 301 characters indexed per append; the earlier full rewrite p50 2.82-2.86 ms,
3.33-3.61 ms over 15 000 characters (it grows with the note), 10 247 characters indexed per
append (the whole note each time).

Run: `python -m bench.daily_note [--entry-chars 300]`; one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/daily_note.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import HostLoad, emit, make_config, quiet_logs
from bot.app.core import open_core
from bot.storage.inspection import ReadOnlyDatabase
from bot.storage.memory_commit import ExtractionCommit, FileWrite
from memory.workspace.service import appended_text, daily_note_name

CONVERSATION = "console:bench"


def _entry(n: int, chars: int) -> str:
    words = f"- entry {n}: lunch with Ann at the harbour, talked about the budget and the trip to Porto; "
    return (words * (chars // len(words) + 1))[:chars].rstrip()


async def run(entry_chars: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="matebot-daily-note-") as tmp, ExitStack() as stack:
        config = make_config(Path(tmp))
        cap = config.mate.memory.daily_note_max_chars
        async with open_core(config) as core:
            await core.agents.ensure_configured()
            index = stack.enter_context(ReadOnlyDatabase(config.mate.database.path))
            repos = core.repos
            await repos.conversations.create(CONVERSATION, agent_id=1, channel="console", chat_key=CONVERSATION,
                                             trigger_source="console")
            name = daily_note_name("2026-04-01")
            note, version, n = "", 0, 0
            times: list[float] = []
            late: list[float] = []
            indexed: list[int] = []
            while True:
                entry = _entry(n, entry_chars)
                if note and len(note) + len(entry) + 2 > cap:
                    break
                if note:
                    added = appended_text(note, entry)
                    write = FileWrite(name, note + added, version, appended=added)
                else:
                    write = FileWrite(name, f"# 2026-04-01\n\n{entry}\n", 0)
                run_id = await repos.memory_runs.start(1, "summarize", CONVERSATION)
                before = index.note_index_rows()
                started = time.perf_counter()
                await repos.memory_commits.commit(ExtractionCommit(1, CONVERSATION, [write], 0, run_id,
                                                                   "completed", "bench"))
                elapsed = (time.perf_counter() - started) * 1000
                times.append(elapsed)
                if len(note) > 15_000:
                    late.append(elapsed)
                indexed.append(sum(len(text) for _, text in index.note_index_rows() - before))  # rows new or changed
                note, version, n = write.content, version + 1, n + 1
    cut = statistics.quantiles(times, n=20)
    return {"bench": "daily_note", "appends": len(times), "entry_chars": entry_chars, "note_chars": len(note),
            "p50_ms": round(statistics.median(times), 3), "p95_ms": round(cut[18], 3),
            "last_ms": round(statistics.median(late), 3) if late else None,
            "indexed_chars_per_append": round(statistics.mean(indexed[1:]), 1),
            "target": "an entry is appended and indexed alone: indexed_chars_per_append close to entry_chars"}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entry-chars", type=int, default=300)
    args = parser.parse_args(argv)
    quiet_logs()
    load = HostLoad()
    return emit(asyncio.run(run(args.entry_chars)), load)


if __name__ == "__main__":
    main()
