"""What a memory receipt says for typical extractions: the added lines, shortened, at most three (SPEC S29)."""

from __future__ import annotations

import pytest

from bot.prompts import PromptLibrary
from memory.events import FileChange
from memory.receipts import receipt_text

PROFILE = "# User profile\n\n_Nothing known yet._\n"
DAILY = "memory/2026-12-04.md"


def test_a_move_is_one_line_and_the_daily_note_is_left_out() -> None:
    changes = [FileChange("PROFILE.md", PROFILE, "# User profile\n\n- Lives in Lisbon (moved in November)\n"),
               FileChange(DAILY, "", "# 2026-12-04\n\n- Said they moved to Lisbon last month\n")]
    assert receipt_text(PromptLibrary("en"), changes) == (
        "Noted: Lives in Lisbon (moved in November) (PROFILE.md)\n/undo to take it back")


def test_more_than_three_facts_end_with_how_many_more() -> None:
    after = "# Core memory\n\n" + "".join(f"- Project {n}: ships on Friday\n" for n in range(1, 6))
    text = receipt_text(PromptLibrary("en"), [FileChange("MEMORY.md", "# Core memory\n", after)])
    assert text.splitlines() == ["Noted: Project 1: ships on Friday (MEMORY.md)",
                                 "Noted: Project 2: ships on Friday (MEMORY.md)",
                                 "…and 3 more (MEMORY.md)", "/undo to take it back"]


def test_a_removed_fact_and_a_long_line_are_said_shortly() -> None:
    before = "# Core memory\n\n- Allergic to peanuts\n- Runs on Sundays\n"
    text = receipt_text(PromptLibrary("en"), [FileChange("MEMORY.md", before, "# Core memory\n\n- Runs on Sundays\n")])
    assert text == "Dropped: Allergic to peanuts (MEMORY.md)\n/undo to take it back"
    long = receipt_text(PromptLibrary("en"), [FileChange("PROFILE.md", "", "- " + "word " * 40)])
    assert len(long.splitlines()[0]) < 110 and "…" in long


def test_only_a_daily_note_says_its_first_new_line() -> None:
    changes = [FileChange(DAILY, "# 2026-12-04\n\n- Asked about trains\n",
                          "# 2026-12-04\n\n- Asked about trains\n\n- Planned a Sunday hike with Ana\n- Bought boots\n")]
    assert receipt_text(PromptLibrary("en"), changes) == (
        f"Noted: Planned a Sunday hike with Ana ({DAILY})\n/undo to take it back")


@pytest.mark.parametrize("locale", ["en", "zh-CN"])
def test_nothing_changed_says_nothing(locale: str) -> None:
    assert receipt_text(PromptLibrary(locale), [FileChange("PROFILE.md", PROFILE, PROFILE)]) == ""


def test_chinese_receipt() -> None:
    changes = [FileChange("PROFILE.md", PROFILE, "# 用户资料\n\n- 在学日语，每周二上课\n"),
               FileChange("MEMORY.md", "# 核心记忆\n", "# 核心记忆\n\n- 十二月要交季度报告\n")]
    assert receipt_text(PromptLibrary("zh-CN"), changes) == (
        "已记下：在学日语，每周二上课（PROFILE.md）\n已记下：十二月要交季度报告（MEMORY.md）\n发送 /undo 可撤回")
