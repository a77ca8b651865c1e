"""What the admin API reads from a request: a JSON body, whole-number parameters and ids, within the limits it accepts."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

MAX_JSON_DEPTH = 32
INT64_MAX = 2**63 - 1  # SQLite's largest INTEGER: a bigger id or number can name nothing stored
WHOLE_NUMBER = re.compile(r"[0-9]{1,19}")  # checked before int(): 5 000 digits would raise


class BadRequest(Exception):
    """Answered 400 with the reason (the API's middleware)."""


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object ({} without a body); BadRequest saying what is wrong with it."""
    if not request.can_read_body:
        return {}
    raw = await request.read()
    charset = request.charset or "utf-8"
    try:
        text = raw.decode(charset)
    except LookupError:  # no such codec, or one that is not a text encoding (rot13, hex)
        raise BadRequest(f"unknown charset {charset[:40]!r}: send UTF-8") from None
    except UnicodeError:  # also codecs that fail in their own way (punycode, idna)
        raise BadRequest(f"the body is not valid {charset[:40]} text") from None
    try:
        body = json.loads(text, parse_int=json_int)
    except json.JSONDecodeError:
        raise BadRequest("the body is not valid JSON") from None
    except RecursionError:
        raise BadRequest(f"the JSON is nested deeper than {MAX_JSON_DEPTH} levels") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    if depth(body) > MAX_JSON_DEPTH:
        raise BadRequest(f"the JSON is nested deeper than {MAX_JSON_DEPTH} levels")
    return body


def json_int(digits: str) -> int:
    """A JSON integer, refused beyond SQLite's 64 bits (and before int() meets 5 000 digits)."""
    if len(digits) > 20 or not -INT64_MAX - 1 <= int(digits) <= INT64_MAX:
        raise BadRequest("numbers in the body must fit in 64 bits")
    return int(digits)


def whole_number(raw: str, name: str, low: int, high: int = INT64_MAX) -> int:
    """A query parameter as an integer from `low` to `high`, or a 400 naming it."""
    if not WHOLE_NUMBER.fullmatch(raw) or not low <= int(raw) <= high:
        raise BadRequest(f"{name} must be a whole number from {low} to {high}")
    return int(raw)


def opened_id(body: dict[str, Any], name: str) -> int | None:
    """`agentId` or `fileId` of the file an editor opened (as it was read), if the body names it."""
    value = body.get(name)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise BadRequest(f"{name} must be the {name} the file was read with")
    return value


def depth(value: Any) -> int:
    """How deeply lists and objects nest (iteratively: no recursion on hostile input)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            if level > MAX_JSON_DEPTH:
                break
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, level + 1) for child in children)
    return deepest
