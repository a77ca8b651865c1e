"""The bill of a bench day: billed-equivalent tokens per purpose, and the chat cache re-writes that memory changes cause."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.cost_day_model import CHAT, PURPOSES, Answered
from tests.support.fakes.anthropic_billing import CACHE_TTL_S, prompt_blocks

# Billed-equivalent input tokens per token, as the API prices them against uncached input.
INPUT_RATE = 1.0
WRITE_5M_RATE = 1.25
WRITE_1H_RATE = 2.0
READ_RATE = 0.1
OUTPUT_RATE = 5.0  # output tokens cost five times input (Sonnet-class list prices: $3 / $15 per million)


@dataclass(slots=True)
class PurposeBill:
    """What one purpose's requests were billed, in tokens, and their billed-equivalent sum."""

    calls: int = 0
    input: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    cache_read: int = 0
    output: int = 0

    @property
    def billed(self) -> float:
        return (INPUT_RATE * self.input + WRITE_5M_RATE * self.cache_write_5m + WRITE_1H_RATE * self.cache_write_1h
                + READ_RATE * self.cache_read + OUTPUT_RATE * self.output)

    @property
    def prompt_tokens(self) -> int:
        return self.input + self.cache_write_5m + self.cache_write_1h + self.cache_read

    def add(self, usage: dict[str, Any]) -> None:
        usage = messages_usage(usage)
        split = usage.get("cache_creation") or {}
        self.calls += 1
        self.input += int(usage.get("input_tokens", 0))
        self.cache_write_5m += int(split.get("ephemeral_5m_input_tokens", usage.get("cache_creation_input_tokens", 0)))
        self.cache_write_1h += int(split.get("ephemeral_1h_input_tokens", 0))
        self.cache_read += int(usage.get("cache_read_input_tokens", 0))
        self.output += int(usage.get("output_tokens", 0))


@dataclass(slots=True)
class MemoryRewrites:
    """Chat requests that wrote again what a memory change made unreadable, and what that cost extra."""

    requests: int = 0
    tokens: int = 0
    billed_extra: float = 0.0


@dataclass(slots=True)
class DayBill:
    purposes: dict[str, PurposeBill] = field(default_factory=lambda: {p: PurposeBill() for p in PURPOSES})
    rewrites: MemoryRewrites = field(default_factory=MemoryRewrites)
    chat_prompt_tokens: list[int] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(bill.billed for bill in self.purposes.values())

    @property
    def memory(self) -> float:
        """Extraction, consolidation and compaction, and the chat re-writes memory changes cause."""
        return sum(bill.billed for name, bill in self.purposes.items() if name != CHAT) + self.rewrites.billed_extra


def bill_day(answered: Sequence[Answered]) -> DayBill:
    """The bill of every answered request (billed as the fake reported it), in arrival order."""
    bill = DayBill()
    previous: Answered | None = None
    for item in answered:
        usage = item.request.usage
        if usage is None:  # no answer was billed (an error before the model ran)
            continue
        bill.purposes[item.purpose].add(usage)
        if item.purpose != CHAT:
            continue
        bill.chat_prompt_tokens.append(_prompt(usage))
        if previous is not None:
            _count_rewrite(bill.rewrites, previous, item)
        previous = item
    return bill


def messages_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """Chat Completions usage (prompt_tokens with cached_tokens among them) in Messages API terms."""
    if "prompt_tokens" not in usage:
        return usage
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
    return {"input_tokens": int(usage["prompt_tokens"]) - cached, "cache_read_input_tokens": cached,
            "output_tokens": int(usage.get("completion_tokens", 0))}


def _prompt(usage: dict[str, Any]) -> int:
    usage = messages_usage(usage)
    return (int(usage.get("input_tokens", 0)) + int(usage.get("cache_creation_input_tokens", 0))
            + int(usage.get("cache_read_input_tokens", 0)))


def _system_blocks(body: dict[str, Any]) -> list[str]:
    system = body.get("system")
    if isinstance(system, list):
        return [str(block.get("text", "")) for block in system if isinstance(block, dict)]
    return [str(system or "")]


def _count_rewrite(rewrites: MemoryRewrites, previous: Answered, current: Answered) -> None:
    """A chat request re-writes because of memory when its system prompt changed after the base
    part (PROFILE.md / MEMORY.md, written by an extraction or the nightly review) since the
    previous chat request, and that request's cache was still alive (the gap shorter than the
    lifetime of its last breakpoint). Counted: the tokens it wrote up to where the previous
    request's cached prefix ended, which it would otherwise have read, at the write rate minus
    the read rate."""
    before, now = _system_blocks(previous.request.body), _system_blocks(current.request.body)
    if before == now or before[:1] != now[:1]:
        return  # unchanged, or the base prompt itself changed (the date): not memory's doing
    blocks = prompt_blocks(previous.request.body)
    marked = [index for index, block in enumerate(blocks) if block.ttl is not None]
    if not marked:
        return
    lifetime = blocks[marked[-1]].ttl or CACHE_TTL_S
    if current.request.at - previous.request.at >= lifetime:
        return  # the cache had expired anyway
    cached_prefix = sum(block.tokens for block in blocks[: marked[-1] + 1])
    usage = current.request.usage or {}
    written = int(usage.get("cache_creation_input_tokens", 0))
    redone = max(0, min(written, cached_prefix - int(usage.get("cache_read_input_tokens", 0))))
    if not redone:
        return
    split = usage.get("cache_creation") or {}
    one_hour = int(split.get("ephemeral_1h_input_tokens", 0))
    rate = (WRITE_1H_RATE * one_hour + WRITE_5M_RATE * (written - one_hour)) / written
    rewrites.requests += 1
    rewrites.tokens += redone
    rewrites.billed_extra += redone * (rate - READ_RATE)
