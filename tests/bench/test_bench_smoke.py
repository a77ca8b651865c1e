"""Every bench runs end to end with tiny parameters and prints its one JSON line (no timing asserts)."""

from __future__ import annotations

import gc
import json
import numbers
from collections.abc import Callable
from typing import Any

import pytest

from bench import concurrency, memory_backlog, memory_soak, pipeline, startup


def _only_json_line(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    result: dict[str, Any] = json.loads(lines[0])
    return result


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _run(main: Callable[[list[str]], dict[str, Any]], argv: list[str],
         capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    thresholds = gc.get_threshold()
    try:
        returned = main(argv)
    finally:  # a bench tunes the collector for its own process, as the daemon does
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    printed = _only_json_line(capsys)
    assert printed == json.loads(json.dumps(returned))
    return printed


def test_pipeline_bench_reports_percentiles_per_length(capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(pipeline.main, ["--samples", "3", "--warmup", "1", "--lengths", "10", "100", "--window", "40"],
                  capsys)
    assert result["bench"] == "pipeline"
    for field in ("p50_ms", "p99_ms"):
        assert set(result[field]) == {"10", "100"}
        assert all(_number(v) and v > 0 for v in result[field].values())
    assert result["window_messages_before_call"] == {"10": 10, "100": 40}
    assert result["pending_rows_recorded"] > 0  # publish went through the memory worker


def test_concurrency_bench_reports_a_ratio_per_n(capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(concurrency.main, ["--ns", "1", "3", "--latency", "0.01"], capsys)
    assert result["bench"] == "concurrency"
    assert result["llm_latency_s"] == 0.01
    assert [r["n"] for r in result["results"]] == [1, 3]
    assert all(_number(r["ratio"]) and r["ratio"] > 0 for r in result["results"])
    assert all(_number(r["burst_ratio"]) and r["burst_ratio"] > 0 for r in result["results"])
    assert result["llm_max_in_flight"] == 3


def test_steady_throughput_sums_each_chats_rate_after_its_first_reply() -> None:
    # chat 0 replies every 0.2 s, chat 1 every 0.25 s; chat 1 started late (its first reply
    # at 0.5 s), which must not count against the steady rate
    completions = [(0, k, 0.2 * (k + 1)) for k in range(5)] + [(1, k, 0.5 + 0.25 * k) for k in range(5)]
    per_s, cycle = concurrency.steady_throughput(completions)
    assert per_s == pytest.approx(1 / 0.2 + 1 / 0.25)
    assert cycle == pytest.approx(2 / (1 / 0.2 + 1 / 0.25))


def test_concurrency_bench_over_http_uses_the_sdk(capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(concurrency.main, ["--ns", "2", "--latency", "0.01", "--mode", "http"], capsys)
    assert result["mode"] == "http"
    assert [r["n"] for r in result["results"]] == [2]
    assert _number(result["results"][0]["ratio"])


def test_memory_backlog_bench_reports_idle_and_busy(capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(memory_backlog.main, ["--backlog", "3", "--samples", "3", "--gap", "0",
                                        "--memory-latency", "0.01"], capsys)
    assert result["bench"] == "memory_backlog"
    assert _number(result["idle_p99_ms"]) and _number(result["busy_p99_ms"])
    assert result["drained"] is True
    assert result["memory_llm_calls"] == 3


def test_startup_bench_reaches_ready_and_stops_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(startup.main, ["--conversations", "5", "--runs", "1"], capsys)
    assert result["bench"] == "startup"
    assert result["conversations"] == 5
    assert _number(result["ready_s"]) and _number(result["rss_mb"]) and result["rss_mb"] > 0
    assert result["exit_codes"] == [0]


@pytest.mark.parametrize(("locale", "warmup"), [("en", "1"), ("zh-CN", "0")])
def test_memory_soak_bench_reports_failures_duplicates_budgets_growth(
        locale: str, warmup: str, capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(memory_soak.main, ["--days", "3", "--warmup-days", warmup, "--messages-per-day", "10",
                                     "--locale", locale], capsys)
    assert result["bench"] == "memory_soak"
    assert result["locale"] == locale
    for key in ("failures", "duplicates", "max_budget_ratio", "request_growth", "request_growth_from_empty",
                "request_growth_besides_files", "extractions", "emergence_runs", "emergence_failures",
                "edits_replies", "final_memory_chars", "warmup_failures", "warmup_duplicates", "seconds"):
        assert _number(result[key]), key
    # the warm-up days run but count in no metric: only the 3 measured days do
    assert result["days"] == 3 and result["warmup_days"] == int(warmup) and result["messages"] == 30
    assert result["extractions"] == 3 and result["emergence_runs"] == 3
    if warmup == "0":
        assert result["request_growth_from_empty"] == result["request_growth"]


def test_recall_bench_finds_the_planted_facts(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import recall

    result = _run(recall.main, ["--messages", "3000"], capsys)
    assert result["bench"] == "recall" and result["questions"] == 45
    assert result["messages"] >= 3000 and result["leaked"] == 0
    assert result["recall_at_5"] >= 0.8  # the target is for 100 000 messages; a small corpus is easier
    assert all(_number(result[k]) for k in ("recall_at_5_en", "recall_at_5_zh", "p50_ms", "p95_ms"))
    assert result["target"] == "recall_at_5 >= 0.95, p95_ms <= 20"  # what a full-size run is held to
