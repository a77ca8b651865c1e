"""scripts/real-model-check's own counting: one run's audit from the replies, the stored rows,
the files' versions, the proxy's records and llama-server's log; and the summary line of --runs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

T0 = datetime(2025, 3, 14, 9, 30, tzinfo=timezone.utc)


@pytest.fixture
def lane(script: Callable[[str], ModuleType]) -> ModuleType:
    return script("real_model_check")


class SeenRequests:
    """What the recording proxy hands the audit: its records and its counts."""

    def __init__(self, proxy_module: ModuleType, records: list[Any]) -> None:
        self.records = records
        self._counts = proxy_module.extraction_counts(records)

    def summary(self) -> dict[str, int]:
        return {"model_requests": sum(r.generation for r in self.records), **self._counts}


def test_a_messages_run_is_timed_from_the_server_log_and_counted_from_its_replies(
    lane: ModuleType, script: Callable[[str], ModuleType], tmp_path: Path,
) -> None:
    audit, proxy = script("turn_audit"), script("recording_proxy")
    shown = '<tool_call>{"name": "remember", "arguments": {}}</tool_call>'
    turns = [audit.Turn("Hi, I am Lena.", shown, T0, 0.0, 12.0),
             audit.Turn("Remember Mia's birthday.", "I've saved it.", T0 + timedelta(minutes=1), 50.0, 54.0)]

    def call(started: float, sha: str, extraction: bool, output: int) -> Any:
        return proxy.ProxyRecord(method="POST", path="/v1/messages", sha256=sha, size=1, extraction=extraction,
                                 generation=True, started=started, finished=started + 1, status=200,
                                 output_tokens=output)

    records = [call(1, "a", False, 20), call(20, "x", True, 90), call(30, "x", True, 90), call(51, "b", False, 10)]
    log = tmp_path / "llama-server.log"
    log.write_text("".join(
        f"slot print_timing: id  0 | task {n} | prompt eval time = {p:.2f} ms / 100 tokens (1 ms per token)\n"
        f"slot print_timing: id  0 | task {n} |        eval time = {g:.2f} ms / {out} tokens (1 ms per token)\n"
        for n, (p, g, out) in enumerate([(3000, 1000, 20), (5000, 6000, 90), (5000, 6000, 90), (1000, 1000, 10)])))
    counted = lane.audit(turns, [], [], SeenRequests(proxy, records), log)
    assert counted["raw_timings_from"] == "server log"
    assert counted["first_turn_x_raw"] == 3.0 and counted["followup_x_raw_mean"] == 2.0
    assert counted["first_turn_s"] == 12.0 and counted["followup_s_mean"] == 4.0
    assert counted["replies_with_markup"] == 1 and counted["markup_examples"][0]["kinds"] == ["json_tool_call",
                                                                                               "tool_tag"]
    assert counted["actions_claimed_not_done"] == 1 and counted["claims_not_done"][0]["turn"] == 2
    assert (counted["extraction_requests"], counted["extraction_prompts_repeated"]) == (2, 1)


def test_the_summary_line_adds_up_every_run_in_the_specs_terms(lane: ModuleType) -> None:
    run = {"api": "openai", "facts_in_memory": "3/4", "replies": 5, "replies_with_markup": 0,
           "actions_claimed_not_done": 0, "extraction_requests": 5, "extraction_prompts_repeated": 0,
           "first_turn_x_raw": 2.0, "followup_x_raw_mean": 1.2}
    runs = [run, run, run, {**run, "api": "anthropic", "facts_in_memory": "4/4"},
            {**run, "api": "anthropic", "facts_in_memory": "2/4", "replies_with_markup": 1,
             "first_turn_x_raw": None, "followup_x_raw_mean": 1.8},
            {**run, "api": "anthropic", "actions_claimed_not_done": 2, "extraction_prompts_repeated": 1}]
    total = lane.summary(runs)
    assert total["runs"] == 6 and total["apis"] == ["anthropic", "openai"]
    assert total["facts_found"] == "18/24"
    assert (total["replies"], total["replies_with_markup"], total["actions_claimed_not_done"]) == (30, 1, 2)
    assert (total["extraction_requests"], total["extraction_prompts_repeated"]) == (30, 1)
    assert total["first_turn_x_raw_mean"] == 2.0 and total["followup_x_raw_mean"] == 1.3
    assert total["targets_met"] == {
        "replies_with_markup_0": False, "actions_claimed_not_done_0": False, "extraction_prompts_repeated_0": False,
        "facts_three_quarters": True, "first_turn_within_3x_raw": True, "followups_within_1.5x_raw": True}
