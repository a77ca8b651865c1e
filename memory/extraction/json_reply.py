"""Tolerant parsing of the JSON object a memory model answers with (fences, chatter around it)."""

from __future__ import annotations

import json
import re
from typing import Any

from memory.extraction.edits import InvalidEdits, parse_edits

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)


class InvalidJsonReply(ValueError):
    """The reply holds no JSON object with the required fields."""


def _merged(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose key repeats keeps both values when they are objects: small models write
    `"people_edits": {"P2": ...}, "people_edits": {"P3": ...}`, and json keeps only the last."""
    merged: dict[str, Any] = {}
    for key, value in pairs:
        if isinstance(merged.get(key), dict) and isinstance(value, dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def extract_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in `text`: inside a ``` fence if there is one, else anywhere."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder(object_pairs_hook=_merged)
    for candidate in candidates:
        start = candidate.find("{")
        while start != -1:
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except json.JSONDecodeError:
                start = candidate.find("{", start + 1)
                continue
            if isinstance(value, dict):
                return value
            start = candidate.find("{", start + 1)
    raise InvalidJsonReply("no JSON object in the reply")


def _as_bool(value: Any, field: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidJsonReply(f"{field} must be a boolean")


def _as_text(value: Any, field: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        # A small model's file as a list of its lines: each a bullet unless it is one already.
        return "\n".join(line if line.lstrip().startswith(("#", "-", "*")) else f"- {line}"
                         for line in value if line.strip())
    raise InvalidJsonReply(f"{field} must be a string")


def _keyed(value: Any, field: str) -> dict[str, Any]:
    if value is None or value == [] or value == "":  # "nobody" written as an empty list or text
        return {}
    if not isinstance(value, dict):
        raise InvalidJsonReply(f"{field} must be an object keyed by person (P1, P2, ...)")
    return value


def parse_memory_reply(
    text: str, text_fields: tuple[str, ...], edit_fields: tuple[str, ...] = (), *,
    keyed_text_fields: tuple[str, ...] = (), keyed_edit_fields: tuple[str, ...] = (),
    refused_fields: tuple[str, ...] = (), refuse_unknown: bool = False, changes_win: bool = False,
    no_change: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """{should_update: bool, reason: str, <text_fields>: str, <edit_fields>: tuple[FileEdit, ...]}.

    Missing text fields read as '' and missing edit lists as no edits. A keyed field is an
    object of those per person: {"P1": "...", ...}. A refused field that holds anything
    makes the reply invalid (a direct chat's PROFILE.md fields in a group's reply); so does,
    with `refuse_unknown`, any other field that holds anything in a reply that updates ("people", "P1", a misspelt
    field): what it meant would be dropped without a word. `changes_win`: a reply that holds
    changes to a file updates whatever its should_update says (a daily entry alone only when the
    flag is missing). `no_change`: folded words ("unchanged", "(empty)") a text field may hold to
    say it holds nothing; such a field reads as ''.
    """
    data = extract_json_object(text)
    if "should_update" not in data and not changes_win:
        raise InvalidJsonReply("should_update is missing")
    for field in refused_fields:
        if data.get(field) not in (None, "", [], {}):
            raise InvalidJsonReply(f"{field} does not belong in this reply")
    # With changes_win a missing flag is no error: the fields say whether anything changes.
    flag = _as_bool(data.get("should_update", False), "should_update")
    parsed: dict[str, Any] = {
        "should_update": flag,
        "reason": _as_text(data.get("reason"), "reason"),
    }
    for field in text_fields:
        parsed[field] = _blank_if(no_change, _as_text(data.get(field), field))
    for field in edit_fields:
        try:
            parsed[field] = parse_edits(data.get(field), field)
        except InvalidEdits as exc:
            raise InvalidJsonReply(str(exc)) from None
    for field in keyed_text_fields:
        parsed[field] = {str(key): _blank_if(no_change, _as_text(value, f"{field}.{key}"))
                         for key, value in _keyed(data.get(field), field).items()}
    for field in keyed_edit_fields:
        try:
            parsed[field] = {str(key): parse_edits(value, f"{field}.{key}")
                             for key, value in _keyed(data.get(field), field).items()}
        except InvalidEdits as exc:
            raise InvalidJsonReply(str(exc)) from None
    # A small model writes the changes and then says should_update: false: what it wrote wins.
    missing = "should_update" not in data
    counted = [f for f in (*text_fields, *keyed_text_fields) if missing or f != "daily_entry"]
    parsed["should_update"] = flag or changes_win and _holds_changes(parsed, tuple(counted),
                                                                     (*edit_fields, *keyed_edit_fields))
    if refuse_unknown and (parsed["should_update"] or missing):
        known = {"should_update", "reason", *text_fields, *edit_fields, *keyed_text_fields, *keyed_edit_fields,
                 *refused_fields}
        # A number or a flag beside the fields ("confidence": 0.9) holds nothing that would be lost.
        unknown = [key for key, value in data.items()
                   if key not in known and isinstance(value, (str, list, dict)) and value not in ("", [], {})]
        if unknown:
            raise InvalidJsonReply(f"{', '.join(unknown)}: not a field of this reply (its fields are "
                                   f"{', '.join(sorted(known - set(refused_fields)))})")
    return parsed


def _blank_if(no_change: frozenset[str], text: str) -> str:
    """'' for a text that only says it holds nothing ("(unchanged)", "N/A.", "（空）")."""
    core = text.strip().strip("()（）[]【】.。!！ ").casefold()
    return "" if core in no_change or (not core and text.strip()) else text


def _holds_changes(parsed: dict[str, Any], text_fields: tuple[str, ...], edit_fields: tuple[str, ...]) -> bool:
    def texts(value: Any) -> list[str]:
        return list(value.values()) if isinstance(value, dict) else [value]

    def edits(value: Any) -> list[Any]:
        return [e for group in value.values() for e in group] if isinstance(value, dict) else list(value)

    return (any(text.strip() for field in text_fields for text in texts(parsed[field]))
            or any(edits(parsed[field]) for field in edit_fields))
