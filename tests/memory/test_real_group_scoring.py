"""scripts/real-group-check without the real model: its score, and its whole lane against the fake Messages API.

The lane itself needs llama-server and a 1 GB model, so it is not part of the default run;
these tests keep what it measures honest: the score counts right, wrong and missing facts
as it says, and the conversation it stores reaches the real group extraction so that a
model which files each line under its speaker scores 6/6, and one that files them under
the wrong number scores 0/6 with the remark misattributed.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def lane(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(SCRIPTS))  # a script and its sibling, as `python scripts/...` finds them
    return importlib.import_module("real_group_check")


def test_each_fact_is_right_wrong_or_missing_and_a_copy_elsewhere_is_wrong(lane: ModuleType) -> None:
    profiles = {
        "alice": "# Alice\n\n- Works as a NURSE at night\n- Bob lives in Porto?",
        "bob": "# Bob\n\n- Lives in Porto\n- Carpenter",  # Alice's city, and Bob's own job
        "chen": "# Chen\n\n- Airline pilot\n- Carpenter too",  # Chen's job, and a copy of Bob's
    }
    result = lane.score(lane.EN, profiles)
    assert result.per_fact == {
        "alice.job": "right", "alice.city": "wrong", "bob.job": "wrong",
        "bob.pet": "missing", "chen.job": "right", "chen.hobby": "missing",
    }
    assert (result.facts, result.right, result.wrong, result.missing) == (6, 2, 2, 2)
    assert result.remark_misattributed is False


@pytest.mark.parametrize(("where", "misattributed"), [("chen", True), ("alice", False), ("bob", False)])
def test_the_remark_counts_only_in_the_profile_of_the_member_it_is_about(
    lane: ModuleType, where: str, misattributed: bool,
) -> None:
    profiles = {where: "- afraid of SPIDERS"}
    assert lane.score(lane.EN, profiles).remark_misattributed is misattributed
    assert lane.score(lane.ZH, {where: "- 怕蜘蛛"}).remark_misattributed is misattributed


def test_no_profiles_at_all_is_six_missing(lane: ModuleType) -> None:
    for scenario in (lane.EN, lane.ZH):
        result = lane.score(scenario, {})
        assert (result.right, result.wrong, result.missing, result.remark_misattributed) == (0, 0, 6, False)


def test_every_fact_is_said_once_by_its_owner_and_found_by_its_own_pattern(lane: ModuleType) -> None:
    """A fact pattern that matched another member's words would score a faithful model as wrong."""
    for scenario in (lane.EN, lane.ZH):
        said: dict[str, str] = {}
        for who, text in scenario.lines:
            said[who] = said.get(who, "") + text + "\n"
        for fact in scenario.facts:
            holders = [who for who, text in said.items() if re.search(fact.pattern, text, re.I)]
            assert holders == [fact.owner], (fact.label, holders)
        remark = [who for who, text in said.items() if re.search(scenario.remark.pattern, text, re.I)]
        assert remark == [scenario.remark.speaker]


def _filing(shift: int, scenario: object) -> Callable[[RecordedRequest], Script | None]:
    """A memory model that files every line a person said under the profile `shift` numbers on;
    asked about one person alone (the lane runs a small model's setup), it answers with the lines
    of the person `shift` places on from them."""
    speakers = list(scenario.speakers)  # type: ignore[attr-defined]
    lines: dict[str, list[str]] = {}
    for who, text in scenario.lines:  # type: ignore[attr-defined]
        lines.setdefault(who, []).append(text)

    def respond(recorded: RecordedRequest) -> Script | None:
        system = json.dumps(recorded.body.get("system", ""), ensure_ascii=False)
        prompt = recorded.body["messages"][0]["content"]
        prompt = prompt if isinstance(prompt, str) else " ".join(b.get("text", "") for b in prompt)
        if "people_updates" not in system:
            asked = next((i for i, p in enumerate(speakers) if prompt.startswith(f"{p.name} ")), None)
            if asked is None:
                return None
            filed = speakers[(asked - shift) % len(speakers)]  # whose lines land in the asked one's profile
            return TextReply("\n".join(f"- {line}" for line in lines.get(filed.key, [])) or "NONE")
        prompt = recorded.body["messages"][0]["content"]
        prompt = prompt if isinstance(prompt, str) else " ".join(b.get("text", "") for b in prompt)
        refs = re.findall(r"^(P\d+) = ", prompt, re.M)
        transcript = prompt.split("<transcript>", 1)[1].split("</transcript>", 1)[0]
        said: dict[str, list[str]] = {}
        for ref, words in re.findall(r"^(P\d+) [^:]+: (.*)$", transcript, re.M):
            target = refs[(refs.index(ref) + shift) % len(refs)]
            said.setdefault(target, []).append(f"- {words}")
        return TextReply(json.dumps({"should_update": True, "reason": "filed", "daily_entry": "- talked",
                                     "memory_update": "", "people_updates": {r: "\n".join(w) for r, w in said.items()}},
                                    ensure_ascii=False))
    return respond


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
@pytest.mark.parametrize(("shift", "right", "wrong", "misattributed"), [(0, 6, 0, False), (-1, 0, 6, True)])
async def test_the_lane_scores_a_model_by_where_it_files_each_speakers_words(
    lane: ModuleType, tmp_path: Path, locale: str, shift: int, right: int, wrong: int, misattributed: bool,
) -> None:
    scenario = lane.SCENARIOS[locale]
    async with FakeAnthropic() as llm:
        llm.responder = _filing(shift, scenario)
        result = await lane.run_locale(scenario, locale, llm.url, tmp_path / "work", tmp_path / "dump.md")
    assert result["extraction"] == "completed", result
    assert (result["facts"], result["right"], result["wrong"], result["missing"]) == (6, right, wrong, 0)
    assert result["remark_misattributed"] is misattributed
    # The group's prompt numbered the three speakers, and the profiles are theirs.
    first, _, third = scenario.speakers
    expected = first if shift == 0 else third
    assert result["remark_in"] == [f"people/telegram-{expected.sender_id}.md"]
    # One group request, then one about each of the three people (the lane runs a small model's setup).
    assert result["attempts"] == 1 and result["model_calls"] == 4 and result["attempt_errors"] == []
    # The lane's recording proxy saw them go by, repeated by none.
    assert (result["model_requests"], result["extraction_requests"], result["extraction_prompts_repeated"]) == (4, 4, 0)
    assert [r.path for r in llm.requests] == ["/v1/messages"] * 4
    dump = (tmp_path / "dump.md").read_text()
    assert f"P1 = {first.name}" in dump and f"P3 = {third.name}" in dump
    assert json.loads(json.dumps(result, ensure_ascii=False)) == result  # one JSON line's worth


def test_the_summary_line_adds_up_every_run_in_the_specs_terms(lane: ModuleType) -> None:
    runs = [{"locale": "en", "facts": 6, "right": 5, "wrong": 0, "missing": 1, "remark_misattributed": False,
             "extraction_requests": 1, "extraction_prompts_repeated": 0}] * 3
    runs.append({"locale": "zh-CN", "facts": 6, "right": 3, "wrong": 2, "missing": 1, "remark_misattributed": True,
                 "extraction_requests": 2, "extraction_prompts_repeated": 1})
    total = lane.summary(runs)
    assert (total["facts"], total["right"], total["wrong"], total["missing"]) == (24, 18, 2, 4)
    assert total["remark_misattributed"] == 1 and total["locales"] == ["en", "zh-CN"]
    assert (total["extraction_requests"], total["extraction_prompts_repeated"]) == (5, 1)
    assert total["targets_met"] == {"right_three_quarters": True, "wrong_at_most_1_per_24": False,
                                    "extraction_prompts_repeated_0": False}
