"""An extraction's facts (its daily entry's lines) are linked to the messages they came from, and
search finds those messages by the facts' words."""

from __future__ import annotations

import json
from pathlib import Path

from bot.core.records import MessageRecord
from memory.extraction.facts import fact_lines, linked_facts
from memory.recall.search import MemorySearchService
from tests.support.fakes.anthropic import TextReply
from tests.support.group_chat import GROUP, group_chat
from tests.support.memory_env import memory_env


def _message(id: int, content: str, role: str = "user", name: str | None = None) -> MessageRecord:
    return MessageRecord(id, "c", role, content, 5, None, name, "2026-03-04 12:00:00")


def test_the_facts_of_an_entry_are_its_lines_without_bullets_and_headings() -> None:
    entry = ("## 14:05\n- Ann's sister Mia lives in Lyon\n* [x] Ann booked the dentist for Friday\n"
             "2. Bob plays the cello\n- ok\n\n• 安娜的妹妹住在里昂\n")
    assert fact_lines(entry) == ["Ann's sister Mia lives in Lyon", "Ann booked the dentist for Friday",
                                 "Bob plays the cello", "安娜的妹妹住在里昂"]


def test_each_fact_goes_to_the_turn_sharing_its_rarer_words_its_speakers_first() -> None:
    batch = [
        _message(1, "[Ann] my sister Mia moved to Lyon last month", name="Ann"),
        _message(2, "Lyon is lovely! Say hi to Mia from me", role="assistant"),
        _message(3, "[Bob] Mia and I played the cello together in Lyon", name="Bob"),
        _message(4, "[Ann] and the dentist called, Friday at nine", name="Ann"),
    ]
    links = linked_facts("- Ann's sister Mia moved to Lyon\n- Ann has the dentist on Friday\n"
                         "- Bob plays the cello\n- The weather was grey all week", batch)
    assert [(link.message_id, link.fact) for link in links] == [
        (1, "Ann's sister Mia moved to Lyon"), (4, "Ann has the dentist on Friday"), (3, "Bob plays the cello")]
    assert linked_facts("- Ann's sister Mia moved to Lyon", [_message(5, "{}", role="tool")]) == []


async def test_an_extraction_links_its_facts_and_search_finds_the_turn_by_them(tmp_path: Path) -> None:
    lines = [("111", "Alice", "I finally went to that pottery class on Saturday"),
             ("222", "Bob", "I live in Porto and Alice plays chess"),
             ("111", "Alice", "my cat is called Miso")]
    async with memory_env(tmp_path, **{"min-messages-for-summarize": 0}) as env:
        group = await env.core.agents.for_chat("tg:-1001", "Family")
        await group_chat(env.core, group, lines)
        search = MemorySearchService(env.core.repos.search)
        before = await search.search(group, "ceramics workshop", source="conversations")
        env.fake.push(TextReply(json.dumps({
            "should_update": True, "reason": "facts", "memory_update": "",
            "daily_entry": "- Alice went to a pottery class (a ceramics workshop) on Saturday\n- Miso is Alice's cat"})))
        outcome = await env.service.analyze_and_update_memory(group, GROUP)
        after = await search.search(group, "ceramics workshop", source="conversations")
        messages = await env.core.repos.messages.latest(GROUP, 10)
    assert outcome.status == "completed", outcome
    pottery = next(m.id for m in messages if "pottery" in m.content)
    assert before["count"] == 0
    assert [r["messageId"] for r in after["results"]][:1] == [pottery]
