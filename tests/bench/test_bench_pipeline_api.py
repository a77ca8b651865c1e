"""`bench/pipeline --api`: the real clients against the fakes in their own process, one JSON line (no timing asserts)."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest

from bench import pipeline


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    thresholds = gc.get_threshold()
    try:
        returned = pipeline.main(argv)
    finally:  # the bench tunes the collector for its own process, as the daemon does
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    printed: dict[str, Any] = json.loads(lines[0])
    assert printed == json.loads(json.dumps(returned))
    return printed


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def test_both_protocols_cpu_per_message_and_their_ratio_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(["--api", "both", "--samples", "2", "--warmup", "1", "--lengths", "4", "12"], capsys)
    assert result["bench"] == "pipeline" and result["api"] == "both"
    for field in ("cpu_per_message_ms", "cpu_p50_ms"):
        assert set(result[field]) == {"anthropic", "openai"}
        for by_path in result[field].values():
            assert set(by_path) == {"plain", "streamed"}
            assert all(set(by_length) == {"4", "12"} for by_length in by_path.values())
            assert all(_positive(v) for by_length in by_path.values() for v in by_length.values())
    ratios = result["ratio_openai_to_anthropic"]
    assert set(ratios) == {"plain", "streamed"}
    assert all(_positive(r) for by_length in ratios.values() for r in by_length.values())
    assert result["ratio_max"] == max(r for by_length in ratios.values() for r in by_length.values())
    assert result["window_messages"] == [4, 12]
    # Every message went to the fake in the other process (plus the context probe's few at start).
    assert all(1 <= v < 2 for v in result["requests_per_message"].values())


def test_one_protocol_alone_has_no_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(["--api", "openai", "--samples", "1", "--warmup", "0", "--lengths", "3"], capsys)
    assert result["api"] == "openai"
    assert set(result["cpu_per_message_ms"]) == {"openai"}
    assert "ratio_openai_to_anthropic" not in result
