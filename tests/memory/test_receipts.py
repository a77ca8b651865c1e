"""What a memory receipt says for typical extractions: the added lines, shortened, at most three (SPEC S29)."""

from __future__ import annotations

import asyncio

import pytest

from bot.core.prompts import PromptLibrary
from bot.core.records import ConversationRecord
from bot.schedule.reminders.delivery import ChannelOutbox
from channels.base import CHANNEL_RETRYING, OutboundMessage
from memory.events import FileChange, MemoryCommitted
from memory.trust.receipts import RECEIPT_READY_WAIT, MemoryReceipts, receipt_text

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



async def test_a_receipt_waits_seconds_not_the_outboxs_minute_for_a_reconnecting_channel() -> None:
    """The outbox waits `ready_wait` for a channel that is reconnecting, then hands the message over."""

    class Reconnecting:
        name, state = "telegram", CHANNEL_RETRYING

        def __init__(self) -> None:
            self.sent: list[OutboundMessage] = []

        async def send(self, message: OutboundMessage) -> None:
            self.sent.append(message)

    outbox = ChannelOutbox(ready_wait=3600)  # a reminder waits up to an hour for its channel
    channel = Reconnecting()
    outbox.add(channel)
    message = OutboundMessage("telegram", "7", "Noted: …")
    assert await asyncio.wait_for(outbox.send(message, ready_wait=0.05), 30) is True
    assert channel.sent == [message]


async def test_memory_receipts_ask_the_outbox_for_a_short_wait() -> None:
    class Conversations:
        async def get(self, conversation_id: str) -> ConversationRecord:
            return ConversationRecord(conversation_id, 1, "telegram", "tg:7", None, "channel", None, 0, 0,
                                      "2026-12-04", "2026-12-04", False, is_group=False)

    class Repos:
        conversations = Conversations()

    class Recording:
        def __init__(self) -> None:
            self.waits: list[float | None] = []

        async def send(self, message: OutboundMessage, *, ready_wait: float | None = None) -> bool:
            self.waits.append(ready_wait)
            return True

    outbox = Recording()
    receipts = MemoryReceipts("direct", Repos(), outbox, PromptLibrary("en"))  # type: ignore[arg-type]
    change = FileChange("PROFILE.md", PROFILE, "# User profile\n\n- Lives in Lisbon\n")
    await receipts.committed(MemoryCommitted(1, "tg:7", 1, (change,)))
    assert outbox.waits == [RECEIPT_READY_WAIT] and RECEIPT_READY_WAIT <= 10
