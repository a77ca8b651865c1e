"""What a person was shown, checked from outside: markup in a reply, and an action it claims.

The real-model lanes count from the replies themselves rather than trust the product's own
flags, so this module shares no code with bot.llm.text_tool_calls (the cleaning it checks):
`markup_in` finds tool tags, JSON tool calls and tool results (bare or fenced), and our own
labels (the time label, the "memory updated" note, the summary prefix); `claimed_action`
finds a reply that says it remembered, set a reminder or changed something (en, zh-CN).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# -- markup ----------------------------------------------------------------------------

_CALL_TAGS = ("tool_calls", "tool_call", "tools", "tool", "function_calls", "function_call", "functions")
_RESULT_TAGS = ("tool_response", "tool_result", "tool_output", "function_response", "function_result")
_RESULT_TAG = re.compile(rf"</?(?:{'|'.join(_RESULT_TAGS)})\s*>", re.I)
_CALL_TAG = re.compile(
    rf"</?(?:{'|'.join(_CALL_TAGS)})\s*>|<function=[^<>\s]+\s*>|</function\s*>|<parameter=[^<>\s]+\s*>", re.I)
_SPECIAL_TOKEN = re.compile(r"<\|[a-z_]+\|>|\[TOOL_CALLS\]", re.I)
# Our time label as with_time writes it ("[2025-03-14 09:30] "), wherever it opens a line.
_TIME_LABEL = re.compile(r"(?m)^[ \t]*\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}(?::\d{2})?[^\]\n]{0,40}\]")
# The first words of our own notes to the model (prompts/<locale>/agent/memory-updated.md.j2,
# summary_prefix in strings.yaml); tests/scripts/test_reply_checks.py keeps them in step.
MEMORY_NOTES = ("[Memory updated", "[本次对话开始后记忆已更新")
SUMMARY_PREFIXES = ("[Conversation context summary", "[对话上下文摘要")
_MEMORY_NOTE = re.compile("|".join(re.escape(n) for n in MEMORY_NOTES))
_SUMMARY_PREFIX = re.compile("|".join(re.escape(n) for n in SUMMARY_PREFIXES))
# A fenced block: its language and body. Only a fence a call is written in (json, none, tags)
# is looked into; a ```python block is an answer, whatever dicts it holds.
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n`]*\n?(.*?)(?:```|\Z)", re.S)
_CALL_FENCES = frozenset({"", "json", "json5", "jsonc", "tool_call", "tool_calls", "tools", "xml"})

_ARGUMENTS = frozenset({"arguments", "input", "parameters", "args"})
_CALL_KEYS = frozenset({"name", "type", "id", *_ARGUMENTS})
_CALL_TYPES = frozenset({"function", "tool_use", "tool_call", "function_call"})
_RESULT_TYPES = frozenset({"tool_result", "tool_response", "function_call_output", "function_result"})
_RESULT_VALUES = frozenset({"content", "result", "output", "response"})
_RESULT_KEYS = frozenset({"name", "type", "id", "is_error", "status", "error", *_RESULT_VALUES})
_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class Finding:
    """One piece of markup: its kind and the text around it."""
    kind: str
    snippet: str


def markup_in(text: str) -> list[str]:
    """The kinds of markup `text` shows a person, each once, in the order found; [] when clean.

    Kinds: tool_tag, tool_result_tag, special_token, json_tool_call, json_tool_result,
    fenced_tool_call, fenced_tool_result, empty_fence, time_label, memory_note, summary_prefix.
    """
    kinds: list[str] = []
    for finding in findings(text):
        if finding.kind not in kinds:
            kinds.append(finding.kind)
    return kinds


def findings(text: str) -> list[Finding]:
    """Every piece of markup in `text`, with a snippet of it."""
    found: list[Finding] = []

    def add(kind: str, start: int, end: int) -> None:
        found.append(Finding(kind, _snippet(text, start, end)))

    for pattern, kind in ((_RESULT_TAG, "tool_result_tag"), (_CALL_TAG, "tool_tag"),
                          (_SPECIAL_TOKEN, "special_token"), (_TIME_LABEL, "time_label"),
                          (_MEMORY_NOTE, "memory_note"), (_SUMMARY_PREFIX, "summary_prefix")):
        for match in pattern.finditer(text):
            add(kind, match.start(), match.end())
    outside: list[tuple[int, int]] = []  # the stretches not inside a fence
    pos = 0
    for fence in _FENCE.finditer(text):
        outside.append((pos, fence.start()))
        pos = fence.end()
        if fence.group(1).lower() in _CALL_FENCES:
            for kind, _, _ in _json_markup(fence.group(2)):
                add(f"fenced_{kind}", fence.start(), fence.end())
        if not fence.group(2).replace("`", "").strip():  # "```" alone: what a cut-out call left
            add("empty_fence", fence.start(), fence.end())
    outside.append((pos, len(text)))
    for start, end in outside:
        for kind, at, until in _json_markup(text[start:end]):
            add(f"json_{kind}", start + at, start + until)
    return found


def _json_markup(text: str) -> Iterator[tuple[str, int, int]]:
    """("tool_call" | "tool_result", start, end) of each JSON value in `text` that is one."""
    pos = 0
    while True:
        start = _next_open(text, pos)
        if start < 0:
            return
        try:
            value, end = _DECODER.raw_decode(text, start)
        except ValueError:
            pos = start + 1
            continue
        kind = _json_kind(value)
        if kind is None:
            pos = start + 1  # an ordinary object: a call may still be nested in it
            continue
        yield kind, start, end
        pos = end


def _next_open(text: str, pos: int) -> int:
    starts = [i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0]
    return min(starts) if starts else -1


def _json_kind(value: Any) -> str | None:
    if isinstance(value, list):
        kinds = {_json_kind(item) for item in value} if value else {None}
        return kinds.pop() if len(kinds) == 1 else None  # a list of calls (or of results), nothing else
    if not isinstance(value, dict):
        return None
    keys = set(value)
    kind = value.get("type")
    if kind in _RESULT_TYPES or keys & {"tool_use_id", "tool_call_id"} or value.get("role") in ("tool", "function"):
        return "tool_result"
    if isinstance(value.get("tool_calls"), list) and value["tool_calls"]:
        return "tool_call"
    function = value.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return "tool_call"
    if isinstance(value.get("name"), str) and keys <= _CALL_KEYS and (keys & _ARGUMENTS or kind in _CALL_TYPES):
        return "tool_call"
    if isinstance(value.get("name"), str) and keys <= _RESULT_KEYS and keys & _RESULT_VALUES:
        return "tool_result"
    return None


def _snippet(text: str, start: int, end: int, width: int = 60) -> str:
    piece = text[max(0, start - 20):min(len(text), max(end, start + width))]
    return " ".join(piece.split())[:120]


# -- claimed actions -------------------------------------------------------------------

# Precise on purpose: each names the act as done (or promised) in the first person, so an
# honest "I could not save that" or "should I remind you?" is no claim.
_I_HAVE = r"\bI(?:['’]ve|\s+have)\s+"
_I_WILL = r"\bI(?:['’]ll|\s+will)\s+"
_CLAIMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("reminder", re.compile(
        rf"{_I_HAVE}(?:set|scheduled|created|added)\s+(?:up\s+)?(?:a|the|your|you\s+a)\s+reminder"
        rf"|{_I_WILL}remind\s+you\b|\breminder\s+(?:is|has\s+been)\s+(?:set|scheduled)\b"
        rf"|{_I_HAVE}scheduled\b", re.I)),
    ("reminder", re.compile(r"已(?:经)?(?:为你|帮你|给你)?(?:设置|设定|设好|安排|创建)(?:了)?[^。！\n]{0,12}提醒"
                            r"|(?<!不)(?:我|到时)会(?:按时)?提醒你|提醒已(?:经)?(?:设置|设定|设好|安排)")),
    ("remember", re.compile(
        rf"{_I_HAVE}(?:noted|saved|stored|memori[sz]ed|made\s+a\s+note)\b"
        rf"|{_I_HAVE}(?:written|added|recorded)\s+(?:it|that|this)\b"
        rf"|{_I_WILL}(?:remember|keep\s+that\s+in\s+mind|make\s+a\s+note)\b"
        rf"|{_I_WILL}(?:write|save|store|add|note)\s+(?:it|that|this)\b"
        r"|(?<!n't )(?<!n’t )(?<!not )(?<!never )\b(?:noted|saved|stored)\s+(?:it|that|this)\s+(?:in|to|into)\s+"
        r"(?:my\s+)?(?:memory|MEMORY\.md|PROFILE\.md)"
        r"|\bupdated\s+my\s+memory\b|^\s*(?:Got\s+it[,!.]\s*)?Noted\b", re.I | re.M)),
    ("remember", re.compile(r"(?:我)?已(?:经)?(?:记住|记下|保存|存入|写入|记录|存储)|我记住了|记下了"
                            r"|(?<![不没])我会记住|(?<![不没])会记住的|已(?:经)?更新(?:了)?(?:我的)?记忆")),
    ("change", re.compile(
        rf"{_I_HAVE}(?:updated|changed|deleted|removed|cancell?ed|edited|renamed|corrected)\b"
        r"|\b(?:has|have)\s+been\s+(?:saved|stored|written|overwritten|updated|added|noted|recorded|changed"
        r"|deleted|removed|cancell?ed)\b", re.I)),
    ("change", re.compile(r"已(?:经)?(?:为你|帮你)?(?:更新|修改|删除|取消|更改)")),
)


def claimed_action(text: str) -> str | None:
    """"remember", "reminder" or "change" when the reply says it did (or will do) that; else None."""
    for kind, pattern in _CLAIMS:
        if pattern.search(text):
            return kind
    return None
