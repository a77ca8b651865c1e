"""bench.reminders runs end to end with two reminders and prints its one JSON line (no timing asserts)."""

from __future__ import annotations

import json

import pytest

from bench import reminders


def test_reminders_bench_measures_each_reminders_delay(capsys: pytest.CaptureFixture[str]) -> None:
    returned = reminders.main(["--count", "2", "--per-second", "2"])
    [line] = capsys.readouterr().out.splitlines()
    printed = json.loads(line)
    assert printed == json.loads(json.dumps(returned))
    assert printed["bench"] == "reminders" and printed["arrived"] == 2 and printed["early"] == 0
    assert 0 <= printed["min_ms"] <= printed["p50_ms"] <= printed["p95_ms"] <= printed["max_ms"]
