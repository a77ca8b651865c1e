"""Each turn of a lane's chat checked from outside: what the person was shown, what really ran,
and the turn's time against the model's own time for its new tokens.

The inputs are what a lane can see without trusting the product's flags: the replies as the
API returned them, the stored messages (a tool ran when its tool_use has a tool_result that is
no error), the memory files' kept versions (when each was made), and the recording proxy's
requests with llama-server's timings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from recording_proxy import ProxyRecord
from reply_checks import claimed_action, findings

EXAMPLES = 3  # how many replies with markup (or false claims) the JSON line quotes


class StoredMessage(Protocol):
    """A stored message row as bot.core.records.MessageRecord has it."""
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def content_format(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Turn:
    """One user message the lane sent and the reply the person was shown ("" when none)."""
    text: str
    reply: str
    sent: datetime  # aware, UTC: compared with the stored versions' times
    started: float  # time.monotonic(): compared with the proxy's records
    finished: float


@dataclass(frozen=True, slots=True)
class FileVersion:
    """A kept version of a workspace file: which, when (ISO, UTC) and what made it."""
    filename: str
    created: str
    change: str


def _blocks(row: StoredMessage) -> list[dict[str, Any]]:
    if row.content_format != "blocks":
        return []
    try:
        value = json.loads(row.content)
    except ValueError:
        return []
    return [b for b in value if isinstance(b, dict)] if isinstance(value, list) else []


def _text(row: StoredMessage) -> str:
    blocks = _blocks(row)
    return "\n".join(str(b.get("text") or "") for b in blocks) if blocks else row.content


def tools_run(rows: Sequence[StoredMessage], turns: Sequence[Turn]) -> list[list[str]]:
    """For each turn, the tools that ran in it: a tool_use in an assistant row between the turn's
    user message and the next turn's, answered by a tool_result that is not an error."""
    ran: list[list[str]] = [[] for _ in turns]
    current = -1
    names: dict[str, str] = {}
    for row in rows:
        if row.role == "user":
            following = current + 1
            if following < len(turns) and turns[following].text in _text(row):
                current = following
            continue
        if current < 0:
            continue
        for block in _blocks(row):
            if row.role == "assistant" and block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
            elif row.role == "tool" and block.get("type") == "tool_result" and not block.get("is_error"):
                ran[current].append(names.get(str(block.get("tool_use_id")), "?"))
    return ran


MEMORY_FILES = ("PROFILE.md", "MEMORY.md")


def memory_changes(versions: Sequence[FileVersion], turns: Sequence[Turn]) -> list[list[str]]:
    """For each turn, the memory files (PROFILE.md, MEMORY.md, people/...) given a new version from
    when it was sent until the next turn was (the lane's extraction after a turn included, as the
    worker saves an explicit "remember" at once); the daily note, written on every run, is not one."""
    changed: list[list[str]] = [[] for _ in turns]
    for version in versions:
        if version.change == "import" or not (version.filename in MEMORY_FILES
                                              or version.filename.startswith("people/")):
            continue
        try:
            made = datetime.fromisoformat(version.created)
        except ValueError:
            continue
        for n, turn in enumerate(turns):
            until = turns[n + 1].sent if n + 1 < len(turns) else None
            if turn.sent <= made and (until is None or made < until):
                changed[n].append(version.filename)
    return changed


def claim_done(kind: str, tools: Sequence[str], changed: Sequence[str]) -> bool:
    """Whether what a reply claims happened: a memory file changed or a writing memory tool ran
    (remember), a scheduling tool ran (reminder), or any tool but a look-up ran (change)."""
    if kind == "reminder":
        return any("schedule" in t or "remind" in t for t in tools)
    writes = [t for t in tools if not t.startswith(("read_", "list_", "search"))]
    if kind == "remember":
        return bool(changed) or any("memory" in t or "remember" in t for t in writes)
    return bool(changed) or bool(writes)


def reply_counts(turns: Sequence[Turn], tools: Sequence[Sequence[str]],
                 changed: Sequence[Sequence[str]]) -> dict[str, Any]:
    """replies_with_markup and actions_claimed_not_done (each with a few examples), counted from
    the replies' text."""
    markup: list[dict[str, Any]] = []
    false_claims: list[dict[str, Any]] = []
    for n, turn in enumerate(turns):
        found = findings(turn.reply)
        if found:
            markup.append({"turn": n + 1, "kinds": sorted({f.kind for f in found}), "snippet": found[0].snippet})
        kind = claimed_action(turn.reply)
        if kind is not None and not claim_done(kind, tools[n], changed[n]):
            false_claims.append({"turn": n + 1, "claim": kind, "tools_run": list(tools[n]),
                                 "snippet": " ".join(turn.reply.split())[:160]})
    return {"replies": sum(bool(t.reply) for t in turns),
            "replies_with_markup": len(markup), "markup_examples": markup[:EXAMPLES],
            "actions_claimed_not_done": len(false_claims), "claims_not_done": false_claims[:EXAMPLES]}


# -- time ------------------------------------------------------------------------------


def assign_log_timings(records: Sequence[ProxyRecord], logged: Sequence[dict[str, Any]]) -> bool:
    """Give each model call without timings in its answer (the Messages API carries none) the
    server log's timings, in order: only when the log holds exactly one entry per model call
    (one slot: they finish in the order they came) and the token counts agree where known."""
    calls = sorted((r for r in records if r.generation and r.status == 200), key=lambda r: r.finished or 0.0)
    if not calls or len(calls) != len(logged):
        return False
    for record, timing in zip(calls, logged):
        known = record.output_tokens
        if known is not None and abs(int(timing.get("predicted_n", known)) - known) > 1:
            return False
    for record, timing in zip(calls, logged):
        if record.timings is None:
            record.timings = dict(timing)
    return True


def turn_times(turns: Sequence[Turn], records: Sequence[ProxyRecord]) -> dict[str, Any]:
    """first_turn_s, followup_s_mean, and each against the model's raw time for the turn's new
    tokens (prompt tokens not in the server's cache, and the tokens written): first_turn_x_raw,
    followup_x_raw_mean; null where a call of the turn has no timings."""
    seconds = [t.finished - t.started for t in turns]
    ratios: list[float | None] = []
    raw_all: list[float | None] = []
    for turn, took in zip(turns, seconds):
        calls = [r for r in records if r.generation and not r.extraction and turn.started <= r.started <= turn.finished]
        raws = [r.raw_seconds for r in calls]
        raw = sum(x for x in raws if x is not None) if calls and None not in raws else None
        raw_all.append(raw)
        ratios.append(round(took / raw, 2) if raw else None)
    follow = seconds[1:]
    follow_ratios = ratios[1:]
    return {
        "first_turn_s": round(seconds[0], 1) if seconds else None,
        "followup_s_mean": round(sum(follow) / len(follow), 1) if follow else None,
        "first_turn_x_raw": ratios[0] if ratios else None,
        "followup_x_raw_mean": (round(sum(x for x in follow_ratios if x is not None) / len(follow_ratios), 2)
                                if follow_ratios and None not in follow_ratios else None),
        "turn_x_raw": ratios,
        "turn_raw_s": [None if r is None else round(r, 1) for r in raw_all],
    }
