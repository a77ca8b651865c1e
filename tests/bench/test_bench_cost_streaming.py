"""bench/cost and bench/streaming run end to end with small parameters (no targets asserted here)."""

from __future__ import annotations

import json

import pytest

from bench import cost


def test_cost_bench_burst_reports_a_ratio_below_one(capsys: pytest.CaptureFixture[str]) -> None:
    result = cost.main(["--scenario", "burst", "--turns", "6"])
    (line,) = capsys.readouterr().out.splitlines()

    assert json.loads(line) == json.loads(json.dumps(result))
    assert result["chat_calls"] == 6
    # the cache is read from the second turn on: cheaper than the same run without it
    assert 0 < result["cost_ratio"] < 1
    assert result["chat_billed_cached"] < result["chat_billed_uncached"]
    openai = result["openai"]  # the same burst on Chat Completions: the provider's prefix cache
    assert openai["chat_calls"] == 6 and 0 < openai["cost_ratio"] < 1


def test_streaming_bench_shows_text_before_the_answer_is_done(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import streaming

    result = streaming.main(["--ttft", "0.1", "--rate", "200", "--tokens", "120", "--runs", "1"])
    (line,) = capsys.readouterr().out.splitlines()

    assert json.loads(line) == json.loads(json.dumps(result))
    assert result["first_text_s"] < result["reply_done_s"]
    assert result["first_text_s"] < result["first_text_without_streaming_s"]
    openai = result["openai"]
    assert openai["first_text_s"] < openai["reply_done_s"]
    assert openai["first_text_s"] < openai["first_text_without_streaming_s"]
