"""bench/cost's day scenario end to end on a tiny day, and the bill it is built on (the fake's 1-hour cache, memory re-writes)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import pytest

from bench import cost
from bench.cost_bill import bill_day
from bench.cost_day_model import CHAT, EXTRACTION, Answered
from tests.support.fakes.anthropic import FakeAnthropic

DAY_KEYS = {"cost_per_message_tokens", "cost_ratio", "memory_share", "baseline_cost_per_message_tokens", "breakdown",
            "memory_rewrites", "user_messages", "sessions"}
BURST_KEYS = {"bench", "turns", "cost_ratio", "memory_cost_ratio", "chat_billed_cached", "chat_billed_uncached",
              "chat_calls", "memory_calls", "turn_gap_s", "target", "loadavg_1m", "host_other_cpu_share", "openai"}


def _run(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = cost.main(argv)
    return result, out.getvalue().splitlines()


@pytest.fixture(scope="module")
def tiny_day() -> tuple[dict[str, Any], list[str]]:
    # Six messages in two sessions over a shorter past: the whole pipeline, twice, in seconds.
    return _run(["--messages", "6", "--sessions", "2", "--history-tokens", "6000"])


def test_the_day_is_the_default_scenario_and_prints_one_json_line(tiny_day: tuple[dict[str, Any], list[str]]) -> None:
    result, lines = tiny_day
    (line,) = lines
    assert json.loads(line) == json.loads(json.dumps(result))
    assert result["scenario"] == "day" and DAY_KEYS <= result.keys()
    assert result["user_messages"] == 6 and result["sessions"] == 2
    assert result["baseline_cost_per_message_tokens"] == cost.BASELINE_COST_PER_MESSAGE_TOKENS > 0
    assert result["breakdown"]["chat"]["calls"] == 6
    # what the daemon recorded in mate_llm_usage is what the fake billed, call for call
    assert result["recorded_matches_billed"] is True
    openai = result["openai"]  # the same day on Chat Completions, the provider's prefix cache
    assert openai["recorded_matches_billed"] is True and openai["breakdown"]["chat"]["calls"] == 6
    assert 0 < openai["cost_ratio"] < 1 and openai["breakdown"]["chat"]["cache_read"] > 0
    assert openai["breakdown"]["emergence"]["calls"] >= 2  # the nightly review ran its tools


def test_caching_pays_on_a_day_with_realistic_gaps(tiny_day: tuple[dict[str, Any], list[str]]) -> None:
    result, _ = tiny_day
    assert 0 < result["cost_ratio"] < 1
    assert result["cost_per_message_tokens"] < result["uncached_cost_per_message_tokens"]
    chat = result["breakdown"]["chat"]
    # turns minutes apart are written for the hour; the nightly review, hours after the last
    # turn, for 5 minutes
    assert chat["cache_read"] > 0 and chat["cache_write_1h"] > 0
    assert result["breakdown"]["emergence"]["cache_write_5m"] > 0
    assert result["gaps_s"]["max"] > 3600  # the two sessions are hours apart


def test_memory_share_counts_extraction_the_nightly_review_and_the_rewrites(
    tiny_day: tuple[dict[str, Any], list[str]],
) -> None:
    result, _ = tiny_day
    parts = result["breakdown"]
    assert parts["extraction"]["calls"] > 0 and parts["extraction"]["billed"] > 0
    assert parts["emergence"]["calls"] >= 3  # list, read the notes, edit MEMORY.md, a last line
    total = sum(p["billed"] for p in parts.values())
    memory = (parts["extraction"]["billed"] + parts["emergence"]["billed"] + parts["compaction"]["billed"]
              + result["memory_rewrites"]["billed_extra"])
    assert result["memory_share"] == pytest.approx(memory / total, abs=2e-4)
    assert result["memory_share"] > parts["extraction"]["billed"] / total


def test_the_burst_scenario_keeps_its_keys() -> None:
    result, lines = _run(["--scenario", "burst", "--turns", "3"])
    (line,) = lines
    assert set(json.loads(line)) == BURST_KEYS and set(result) == BURST_KEYS
    assert result["chat_calls"] == 3


# -- the bill on the fake's own records ----------------------------------------------------


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeAnthropic]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    async with FakeAnthropic() as server:
        yield server



@pytest.fixture
async def ask(fake: FakeAnthropic) -> AsyncIterator[Callable[..., Any]]:
    client = anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0)

    async def send(system: list[dict[str, Any]], history: str = "tell me " * 800, ttl: str = "5m") -> None:
        messages = [{"role": "user", "content": [{"type": "text", "text": history,
                                                  "cache_control": {"type": "ephemeral", "ttl": ttl}}]}]
        request: dict[str, Any] = {"model": "m", "max_tokens": 20, "system": system, "messages": messages}
        await client.messages.create(**request)

    yield send
    await client.close()


def _system(workspace: str, ttl: str = "5m") -> list[dict[str, Any]]:
    control = {"type": "ephemeral", "ttl": ttl}
    return [{"type": "text", "text": "base rules " * 500, "cache_control": control},
            {"type": "text", "text": workspace, "cache_control": control}]


async def test_one_hour_writes_are_billed_twice_input_and_read_for_an_hour(
    fake: FakeAnthropic, ask: Callable[..., Any],
) -> None:
    clock = [0.0]
    fake.now = lambda: clock[0]
    await ask(_system("memory", "1h"), ttl="1h")
    clock[0] += 59 * 60
    await ask(_system("memory", "1h"), ttl="1h")
    bill = bill_day([Answered(request, CHAT) for request in fake.requests])
    chat = bill.purposes[CHAT]
    assert chat.cache_write_1h > 1024 and chat.cache_write_5m == 0
    assert chat.cache_read == chat.cache_write_1h  # 59 minutes later it was all read
    assert chat.billed == pytest.approx(chat.input + 2.0 * chat.cache_write_1h + 0.1 * chat.cache_read
                                        + 5.0 * chat.output)


@pytest.mark.parametrize(("gap_s", "rewrites"), [(60, 1), (10 * 60, 0)])
async def test_a_memory_change_counts_as_a_rewrite_only_while_the_cache_was_warm(
    fake: FakeAnthropic, ask: Callable[..., Any], gap_s: int, rewrites: int,
) -> None:
    clock = [0.0]
    fake.now = lambda: clock[0]
    await ask(_system("--- MEMORY.md ---\n- likes tea"))
    clock[0] += gap_s
    await ask(_system("--- MEMORY.md ---\n- likes tea\n- moved to Lisbon"))
    clock[0] += 30
    await ask(_system("--- MEMORY.md ---\n- likes tea\n- moved to Lisbon"))  # unchanged: reads
    bill = bill_day([Answered(request, CHAT) for request in fake.requests])
    assert bill.rewrites.requests == rewrites
    if rewrites:
        second = fake.requests[1].usage
        assert second is not None
        # it wrote the history again, which it would have read had MEMORY.md stayed as it was
        assert bill.rewrites.tokens >= 1000
        assert bill.rewrites.billed_extra == pytest.approx(bill.rewrites.tokens * (1.25 - 0.1))
        assert bill.memory == pytest.approx(bill.rewrites.billed_extra)  # no extraction billed here
    assert bill.purposes[EXTRACTION].calls == 0
