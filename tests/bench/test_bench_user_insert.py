"""bench/user_insert runs end to end with small parameters (no targets asserted here)."""

from __future__ import annotations

import json

import pytest

from bench import user_insert


def test_user_insert_bench_times_each_message_of_an_active_chat(capsys: pytest.CaptureFixture[str]) -> None:
    result = user_insert.main(["--ttfts", "0.1", "--tokens", "5", "--messages", "2"])
    (line,) = capsys.readouterr().out.splitlines()

    assert json.loads(line) == json.loads(json.dumps(result))
    assert len(result["first_text_runs_s"]["0.1"]) == 2
    # the model is asked before the first token can be shown, which takes the ttft at least
    assert result["model_request_ms"]["0.1"] / 1000 + 0.1 <= result["first_text_s"]["0.1"]
