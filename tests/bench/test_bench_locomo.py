"""bench/recall_locomo.py on a tiny file in LoCoMo's format: parsing, scoring and scoping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import recall_locomo


def _sample(a: str, b: str, sessions: list[list[str]], qa: list[dict[str, Any]]) -> dict[str, Any]:
    conversation: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
    for number, texts in enumerate(sessions, start=1):
        conversation[f"session_{number}_date_time"] = f"1:5{number} pm on {number} May, 2023"
        conversation[f"session_{number}"] = [
            {"speaker": (a, b)[turn % 2], "dia_id": f"D{number}:{turn + 1}", "text": text}
            for turn, text in enumerate(texts)]
    return {"sample_id": f"{a}-{b}", "conversation": conversation, "qa": qa}


def _data(tmp_path: Path) -> Path:
    first = _sample("Ann", "Bo", [
        ["Hi Bo, how was your week?", "Busy, I adopted a greyhound called Pixel.", "Lovely, send photos!"],
        ["I started pottery classes on Mondays.", "Nice, what do you make?", "Mostly bowls so far."],
    ], [
        {"question": "What is the name of Bo's greyhound?", "answer": "Pixel", "evidence": ["D1:2"], "category": 4},
        {"question": "When does Ann take pottery classes?", "answer": "Mondays", "evidence": ["D2:1"], "category": 2},
        {"question": "What did Ann make in pottery and what pet does Bo have?", "answer": "bowls; a dog",
         "evidence": ["D2:3; D1:2"], "category": 1},
        {"question": "Is there anything unanswerable?", "answer": "", "evidence": ["D1:1"], "category": 5},
    ])
    # The other group talks about greyhounds too: none of its rows may answer the first group's questions.
    second = _sample("Cy", "Di", [["My greyhound Pixel is famous here.", "Greyhound races on Mondays."]], [
        {"question": "Who has a famous greyhound?", "answer": "Cy", "evidence": ["D1:1"], "category": 4},
    ])
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([first, second]), encoding="utf-8")
    return path


def test_locomo_bench_scores_evidence_per_question_and_never_leaks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    returned = recall_locomo.main(["--data", str(_data(tmp_path))])
    printed = json.loads(capsys.readouterr().out.strip())
    assert printed == returned
    assert printed["questions"] == 4  # category 5 is left out
    assert printed["messages"] == 8
    assert printed["leaked"] == 0
    assert printed["by_category"]["single_hop"]["questions"] == 2
    assert printed["by_category"]["single_hop"]["hit_at_5"] == 1.0
    assert printed["by_category"]["temporal"]["recall_at_5"] == 1.0
    # Two evidence turns in two sessions, both findable: the odd "D2:3; D1:2" label is parsed.
    assert printed["by_category"]["multi_hop"]["questions"] == 1
    assert 0.5 <= printed["by_category"]["multi_hop"]["recall_at_5"] <= 1.0
    for key in ("recall_at_5", "hit_at_5", "shown_at_5", "session_recall_at_5", "p50_ms", "p95_ms"):
        assert isinstance(printed[key], (int, float))


def test_locomo_bench_parses_the_datasets_odd_labels_and_dates() -> None:
    assert recall_locomo.evidence_ids(["D8:6; D9:17", "D", "D:11:26", "D1:3"]) == {"D8:6", "D9:17", "D1:3"}
    assert recall_locomo.session_time("1:56 pm on 8 May, 2023").isoformat() == "2023-05-08T13:56:00"
    assert recall_locomo.session_time("12:09 am on 13 September, 2023").hour == 0


def test_locomo_bench_without_its_data_says_so_and_prints_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert recall_locomo.main(["--data", str(tmp_path / "missing.json")]) is None
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "not found" in captured.err
