"""How the fake Messages API bills a request, as the real one does: tokens counted from the
request, images and PDFs by size, prompt caching by `cache_control` prefixes, and the
image checks the real API makes before answering."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def is_cjk(char: str) -> bool:
    code = ord(char)
    return (0x2E80 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF
            or 0xFF00 <= code <= 0xFFEF or 0x20000 <= code <= 0x2FFFF)


# The ranges is_cjk names, as one character class: counting with it is ~50x cheaper than a loop
# over every character of a prompt the fake bills on each request.
_CJK = re.compile("[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0002ffff]")


def estimate_tokens(text: str) -> int:
    """Roughly what the real tokenizer counts: a CJK character is ~1 token, other text ~4 characters."""
    cjk = len(_CJK.findall(text))
    return cjk + -(-(len(text) - cjk) // 4)


def cut_to_tokens(text: str, budget: int) -> str:
    """The longest prefix of text that fits in `budget` tokens."""
    used = 0.0
    for index, char in enumerate(text):
        used += 1.0 if is_cjk(char) else 0.25
        if used > budget:
            return text[:index]
    return text


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() if key not in ("type", "cache_control") for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def request_tokens(body: dict[str, Any]) -> int:
    """input_tokens for a request: its system prompt, messages and tool definitions, plus framing."""
    return sum(block.tokens for block in prompt_blocks(body))


CACHE_MIN_TOKENS = 1024  # shorter prefixes are not cached (the Sonnet / Opus minimum)
CACHE_TTL_S = 300.0  # the default 5-minute lifetime, refreshed by every read
CACHE_TTLS = {"5m": CACHE_TTL_S, "1h": 3600.0}  # the `ttl` values cache_control accepts
CACHE_LOOKBACK = 20  # block boundaries before a breakpoint that are checked for an earlier entry

# The system prompt the API adds to every request with tools, per model family and tool_choice
# ("auto"/"none", "any"/"tool"), from the tool-use pricing table of Anthropic's docs. Claude 4
# models (Opus, Sonnet, Haiku 4.5) and Sonnet 3.7 add 346 / 313; unknown ids (claude-fake,
# the config's default) are taken as a current model.
TOOL_USE_PROMPT_TOKENS: tuple[tuple[str, tuple[int, int]], ...] = (
    ("claude-3-opus", (530, 281)),
    ("claude-3-sonnet", (159, 235)),
    ("claude-3-haiku", (264, 340)),
    ("claude-3-5-haiku", (264, 340)),
)
TOOL_USE_PROMPT_DEFAULT = (346, 313)


def tool_use_prompt_tokens(body: dict[str, Any]) -> int:
    """Tokens of the API's own tool-use system prompt: none without tools."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return 0
    model = str(body.get("model", ""))
    auto, forced = next((counts for prefix, counts in TOOL_USE_PROMPT_TOKENS if model.startswith(prefix)),
                        TOOL_USE_PROMPT_DEFAULT)
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else "auto"
    return forced if kind in ("any", "tool") else auto


@dataclass(frozen=True, slots=True)
class PromptBlock:
    """One block of the prompt in cache order: its identity, its tokens, its breakpoint's lifetime."""

    key: str
    tokens: int
    ttl: float | None  # seconds; None: no cache_control on this block


def _ttl(unit: Any) -> float | None:
    control = unit.get("cache_control") if isinstance(unit, dict) else None
    if not isinstance(control, dict):
        return None
    return CACHE_TTLS.get(str(control.get("ttl", "5m")), CACHE_TTL_S)


def prompt_blocks(body: dict[str, Any]) -> list[PromptBlock]:
    """The prompt in cache order (tools, system, messages), one PromptBlock per block.

    Tool definitions count as the JSON they are sent as, and the first carries the API's
    tool-use system prompt. tool_choice is part of the first message's identity: changing
    it invalidates the cached messages, not the tools or the system prompt (as documented).
    """
    units: list[tuple[Any, Any, int]] = []  # (unit, its cache_control holder, tokens or -1 to count)
    tools = body.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else []):
        definition = json.dumps(_without_cache_control(tool), ensure_ascii=False)
        extra = tool_use_prompt_tokens(body) if index == 0 else 0
        units.append((tool, tool, estimate_tokens(definition) + extra))
    system = body.get("system")
    if isinstance(system, str):
        units.append(({"system": system}, None, -1))
    elif isinstance(system, list):
        units.extend((block, block, -1) for block in system)
    messages = body.get("messages")
    first_message = True
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        role = message.get("role") if isinstance(message, dict) else None
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for index, block in enumerate(blocks):
            unit: dict[str, Any] = {"role": role, "first": index == 0, "block": block}
            if first_message and "tool_choice" in body:
                unit["tool_choice"] = body["tool_choice"]
            first_message = False
            units.append((unit, block, -1))
    result: list[PromptBlock] = []
    for position, (unit, holder, counted) in enumerate(units):
        tokens = counted
        if tokens < 0:
            media = _media_tokens(unit["block"]) if isinstance(unit, dict) and "block" in unit else None
            strings = _strings({k: v for k, v in unit.items() if k != "tool_choice"})
            tokens = media if media is not None else sum(estimate_tokens(text) for text in strings)
            if isinstance(unit, dict) and unit.get("first"):
                tokens += 4
        if position == 0:
            tokens += 3
        key = json.dumps(_without_cache_control(unit), sort_keys=True, ensure_ascii=False)
        result.append(PromptBlock(key, tokens, _ttl(holder)))
    return result


def cache_problem(body: dict[str, Any]) -> str | None:
    """The real API's 400 for cache_control it refuses (an unknown ttl, a 1-hour breakpoint
    after a 5-minute one), else None."""
    holders: list[Any] = []
    tools = body.get("tools")
    holders.extend(tools if isinstance(tools, list) else [])
    system = body.get("system")
    holders.extend(system if isinstance(system, list) else [])
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        holders.extend(content if isinstance(content, list) else [])
    seen_short = False
    for holder in holders:
        control = holder.get("cache_control") if isinstance(holder, dict) else None
        if not isinstance(control, dict):
            continue
        ttl = str(control.get("ttl", "5m"))
        if ttl not in CACHE_TTLS:
            return f"cache_control.ttl: Input should be '5m' or '1h' (got {ttl!r})"
        if ttl == "1h" and seen_short:
            return ("cache_control: a block with ttl='1h' must come before any block with ttl='5m' "
                    "(longer-lived cache entries first)")
        seen_short = seen_short or ttl == "5m"
    return None


IMAGE_TYPES = {"image/jpeg": "JPEG", "image/png": "PNG", "image/gif": "GIF", "image/webp": "WEBP"}
IMAGE_MAX_BYTES = 5 * 1024 * 1024  # per image, decoded
IMAGE_MAX_SIDE = 8000


def _media_tokens(block: Any) -> int | None:
    """What the real API bills for an image (width x height / 750, after scaling to about
    1.15 megapixels) or a PDF (text and an image per page); None for other blocks."""
    if not isinstance(block, dict) or block.get("type") not in ("image", "document"):
        return None
    data = _decoded(block)
    if data is None:
        return 0
    if block["type"] == "document":
        return max(1, len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", data))) * 2000
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
    return min(1600, -(-width * height // 750))


def _decoded(block: dict[str, Any]) -> bytes | None:
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "base64":
        return None
    try:
        return base64.b64decode(str(source.get("data", "")), validate=True)
    except ValueError:
        return None


def media_problem(body: dict[str, Any]) -> str | None:
    """The real API's 400 for an image or document it cannot use, else None."""
    from PIL import Image, UnidentifiedImageError

    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") not in ("image", "document"):
                continue
            if message.get("role") != "user":
                return f"{block['type']} blocks are only allowed in user messages"
            data = _decoded(block)
            media_type = str((block.get("source") or {}).get("media_type", ""))
            if data is None:
                return "source.data: invalid base64 data"
            if block["type"] == "document":
                if media_type != "application/pdf" or not data.startswith(b"%PDF-"):
                    return "The PDF specified was not valid."
                continue
            if media_type not in IMAGE_TYPES:
                return f"source.media_type: Input should be one of {', '.join(IMAGE_TYPES)}"
            if len(data) > IMAGE_MAX_BYTES:
                return "image exceeds 5 MB maximum"
            try:
                with Image.open(io.BytesIO(data)) as image:
                    fmt, size = image.format, image.size
            except (UnidentifiedImageError, OSError):
                return "Could not process image"
            if fmt != IMAGE_TYPES[media_type]:
                return f"Image does not match the provided media type {media_type}"
            if max(size) > IMAGE_MAX_SIDE:
                return f"image dimensions exceed max allowed size: {IMAGE_MAX_SIDE} pixels"
    return None


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class CacheUsage:
    """What one request is billed: uncached input, cache writes by lifetime, cache reads."""

    input_tokens: int
    cache_read_input_tokens: int = 0
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0

    @property
    def cache_creation_input_tokens(self) -> int:
        return self.ephemeral_5m_input_tokens + self.ephemeral_1h_input_tokens


class PromptCache:
    """Anthropic's prompt caching as billed: prefixes up to a `cache_control` breakpoint.

    A breakpoint's entry lives 5 minutes (`"ttl": "1h"`: 60 minutes). A read renews it for its
    own lifetime, and with it the entries of the request's earlier breakpoints inside what was
    read. Written tokens are billed by the lifetime of the breakpoint they are written up to:
    the part up to the last 1-hour breakpoint as 1-hour writes (2x), the rest as 5-minute
    writes (1.25x); reads 0.1x.
    """

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._entries: dict[str, tuple[float, float]] = {}  # prefix hash -> (expiry, lifetime)
        self.enabled = True

    def usage(self, body: dict[str, Any]) -> CacheUsage:
        blocks = prompt_blocks(body)
        total = sum(block.tokens for block in blocks)
        marks = [index for index, block in enumerate(blocks) if block.ttl is not None][:4]
        if not self.enabled or not marks:
            return CacheUsage(total)
        model = str(body.get("model", ""))
        digests, cumulative, running, hasher = [], [], 0, hashlib.sha256(model.encode())
        for block in blocks:
            hasher.update(block.key.encode())
            digests.append(hasher.copy().hexdigest())
            running += block.tokens
            cumulative.append(running)
        now = self._now()
        read_at = -1
        for mark in marks:
            for index in range(mark, max(-1, mark - CACHE_LOOKBACK - 1), -1):
                entry = self._entries.get(digests[index])
                if entry is not None and entry[0] > now and index > read_at:
                    read_at = index
                    break
        read = cumulative[read_at] if read_at >= 0 else 0
        # What was read is used, and so are the shorter prefixes inside it that have an entry
        # of their own (the tools and base prompt under a longer conversation): all are renewed.
        for index in {read_at, *(mark for mark in marks if mark <= read_at)} - {-1}:
            entry = self._entries.get(digests[index])
            if entry is not None and entry[0] > now:
                self._entries[digests[index]] = (now + entry[1], entry[1])
        written = {CACHE_TTL_S: 0, CACHE_TTLS["1h"]: 0}
        start = read
        for mark in marks:
            if cumulative[mark] >= CACHE_MIN_TOKENS and mark > read_at:
                lifetime = blocks[mark].ttl or CACHE_TTL_S
                written[lifetime] = written.get(lifetime, 0) + cumulative[mark] - start
                start = cumulative[mark]
                self._entries[digests[mark]] = (now + lifetime, lifetime)
        created = start - read
        return CacheUsage(total - read - created, read, written[CACHE_TTL_S], written[CACHE_TTLS["1h"]])
