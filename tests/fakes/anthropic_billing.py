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
from typing import Any


def is_cjk(char: str) -> bool:
    code = ord(char)
    return (0x2E80 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF
            or 0xFF00 <= code <= 0xFFEF or 0x20000 <= code <= 0x2FFFF)


def estimate_tokens(text: str) -> int:
    """Roughly what the real tokenizer counts: a CJK character is ~1 token, other text ~4 characters."""
    cjk = sum(1 for char in text if is_cjk(char))
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
    return sum(tokens for _, tokens, _ in prompt_blocks(body))


CACHE_MIN_TOKENS = 1024  # shorter prefixes are not cached (the Sonnet / Opus minimum)
CACHE_TTL_S = 300.0  # the default 5-minute lifetime, refreshed by every read
CACHE_LOOKBACK = 20  # block boundaries before a breakpoint that are checked for an earlier entry


def prompt_blocks(body: dict[str, Any]) -> list[tuple[str, int, bool]]:
    """The prompt in cache order (tools, system, messages) as (key, tokens, has a breakpoint) per block."""
    units: list[tuple[Any, bool]] = []
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        units.append((tool, isinstance(tool, dict) and "cache_control" in tool))
    system = body.get("system")
    if isinstance(system, str):
        units.append(({"system": system}, False))
    elif isinstance(system, list):
        units.extend((block, isinstance(block, dict) and "cache_control" in block) for block in system)
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        role = message.get("role") if isinstance(message, dict) else None
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for index, block in enumerate(blocks):
            units.append(({"role": role, "first": index == 0, "block": block},
                          isinstance(block, dict) and "cache_control" in block))
    result: list[tuple[str, int, bool]] = []
    for position, (unit, marked) in enumerate(units):
        media = _media_tokens(unit["block"]) if isinstance(unit, dict) and "block" in unit else None
        tokens = media if media is not None else sum(estimate_tokens(text) for text in _strings(unit))
        if isinstance(unit, dict) and unit.get("first"):
            tokens += 4
        if position == 0:
            tokens += 3
        key = json.dumps(_without_cache_control(unit), sort_keys=True, ensure_ascii=False)
        result.append((key, tokens, marked))
    return result


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


class PromptCache:
    """Anthropic's prompt caching as billed: prefixes up to a `cache_control` breakpoint."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._entries: dict[str, float] = {}  # prefix hash -> expiry
        self.enabled = True

    def usage(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(input_tokens, cache_creation_input_tokens, cache_read_input_tokens) for a request."""
        blocks = prompt_blocks(body)
        total = sum(tokens for _, tokens, _ in blocks)
        marks = [index for index, (_, _, marked) in enumerate(blocks) if marked][:4]
        if not self.enabled or not marks:
            return total, 0, 0
        model = str(body.get("model", ""))
        digests, cumulative, running, hasher = [], [], 0, hashlib.sha256(model.encode())
        for key, tokens, _ in blocks:
            hasher.update(key.encode())
            digests.append(hasher.copy().hexdigest())
            running += tokens
            cumulative.append(running)
        now = self._now()
        read_at = -1
        for mark in marks:
            for index in range(mark, max(-1, mark - CACHE_LOOKBACK - 1), -1):
                expiry = self._entries.get(digests[index])
                if expiry is not None and expiry > now and index > read_at:
                    read_at = index
                    break
        read = cumulative[read_at] if read_at >= 0 else 0
        if read_at >= 0:
            self._entries[digests[read_at]] = now + CACHE_TTL_S
        written_to = max((m for m in marks if cumulative[m] >= CACHE_MIN_TOKENS and m > read_at), default=-1)
        created = cumulative[written_to] - read if written_to >= 0 else 0
        for mark in marks:
            if cumulative[mark] >= CACHE_MIN_TOKENS and mark > read_at:
                self._entries[digests[mark]] = now + CACHE_TTL_S
        return total - read - created, created, read
