"""scripts/real-voice-check without the real Whisper server: its word error rate, and its whole
lane (runtime, voice note, stored "[voice]" message) against the fake transcription endpoint."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.fakes.transcription import FakeTranscription, spoken

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def lane(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(SCRIPTS))  # a script and its sibling, as `python scripts/...` finds them
    return importlib.import_module("real_voice_check")


def test_the_word_error_rate_counts_substitutions_deletions_and_insertions(lane: ModuleType) -> None:
    reference = "Please remind me to call my sister about the birthday dinner on Friday evening."
    assert lane.word_error_rate(reference, "[voice] please remind me to call my sister about the birthday "
                                           "dinner on friday evening") == 0
    # "birthday dinner on" heard as "birth they did around": three substitutions and one insertion.
    heard = "Please remind me to call my sister about the birth they did around Friday evening."
    assert lane.word_error_rate(reference, heard) == pytest.approx(4 / 14)
    assert lane.word_error_rate("I am learning Portuguese.", "I'm learning Portuguese") == 0
    assert lane.word_error_rate("one two", "") == 1


async def test_the_lane_stores_each_note_as_its_transcript(lane: ModuleType, tmp_path: Path) -> None:
    notes = []
    for index, sentence in enumerate(lane.SENTENCES[:2]):
        path = tmp_path / f"note-{index}.ogg"
        path.write_bytes(spoken(sentence if index == 0 else "I moved to Lisbon"))
        notes.append((sentence, path, 4.0))
    async with FakeTranscription() as stt:
        results = await lane.run_notes(stt.base_url, notes, tmp_path)
    assert [r["stored"] for r in results] == [f"[voice] {lane.SENTENCES[0]}", "[voice] I moved to Lisbon"]
    assert results[0]["wer"] == 0 and results[1]["wer"] == round(7 / 11, 3)
    assert [r.language for r in stt.requests] == ["en", "en"]
