"""scripts/reply_checks.py: the lanes' own look at a reply, independent of the product's cleaning."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

PROMPTS = Path(__file__).resolve().parents[2] / "prompts"


@pytest.fixture
def checks(script: Callable[[str], ModuleType]) -> ModuleType:
    return script("reply_checks")


@pytest.mark.parametrize(("reply", "kinds"), [
    ('<tool_call>\n{"name": "remember", "arguments": {"text": "Mia: 14 March"}}\n</tool_call>',
     ["tool_tag", "json_tool_call"]),
    ('<tools>remember</tools>', ["tool_tag"]),
    ("<function=schedule_task>\n<parameter=message>stretch</parameter>\n</function>", ["tool_tag"]),
    ('<tool_response>\n{"result": "saved"}\n</tool_response>\nDone!', ["tool_result_tag"]),
    ('Sure. {"name": "schedule_task", "arguments": {"message": "stretch", "at": "2025-03-14T10:02:00"}}',
     ["json_tool_call"]),
    ('{"type": "function", "function": {"name": "remember", "arguments": "{}"}}', ["json_tool_call"]),
    ('{"tool_calls": [{"id": "1", "function": {"name": "remember"}}]}', ["json_tool_call"]),
    ('[{"name": "a", "arguments": {}}, {"name": "b", "input": {}}]', ["json_tool_call"]),
    ('{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}', ["json_tool_result"]),
    ('{"name": "remember", "content": "saved to MEMORY.md"}', ["json_tool_result"]),
    ('{"role": "tool", "tool_call_id": "c1", "content": "ok"}', ["json_tool_result"]),
    ('Saving now:\n```json\n{"name": "remember", "arguments": {"text": "tea"}}\n```\nDone.', ["fenced_tool_call"]),
    ('```\n{"type": "tool_result", "content": "ok"}\n```', ["fenced_tool_result"]),
    ("[2025-03-14 09:30] Good morning, Lena!", ["time_label"]),
    ("Sure!\n  [2025-03-14 09:30 UTC] Good morning", ["time_label"]),
    ("[Memory updated since this conversation started. Where this differs ...]\nPROFILE.md\n  added: - Lena",
     ["memory_note"]),
    ("[本次对话开始后记忆已更新。与上方工作区文件不一致之处，以此处为准。]", ["memory_note"]),
    ("[Conversation context summary - for reference only, not instructions]\nWe talked.", ["summary_prefix"]),
    ("Hello<|im_end|>", ["special_token"]),
    ("```", ["empty_fence"]),  # all the real lane's 1.5B model left of a fenced call once
    ("```json\n\n```", ["empty_fence"]),
])
def test_every_kind_of_markup_is_found(checks: ModuleType, reply: str, kinds: list[str]) -> None:
    assert checks.markup_in(reply) == kinds
    assert all(f.snippet for f in checks.findings(reply))


@pytest.mark.parametrize("reply", [
    "Good morning, Lena! How about oatmeal with berries and a cup of green tea?",
    'Here is your data as JSON: {"name": "Lena", "city": "Leipzig", "diet": "vegetarian"}',
    '```json\n{"name": "Lena", "age": 30, "tags": ["tea", "bike"]}\n```',
    '```python\ncall = {"name": "remember", "arguments": {}}\nprint(call)\n```',
    "Use a[0] and [1, 2, 3], see [the docs](https://example.com) or {braces} in text.",
    "Your sister's birthday is on [14 March], and the meeting is at 2025-03-14 09:30.",
    "x = [[1, 2], [3]]; y = {}; z = []",
    "To call a tool you write <b>bold</b> in HTML, not a <div>.",
    "Mia [2025-03-14 09:30] is a date in the middle of a line.",
    "",
])
def test_an_ordinary_reply_with_json_code_or_brackets_is_clean(checks: ModuleType, reply: str) -> None:
    assert checks.markup_in(reply) == []


@pytest.mark.parametrize(("reply", "claim"), [
    ("I have noted that your sister Mia's birthday is on 14 March.", "remember"),
    ("Got it, noted! Green tea and no meat.", "remember"),
    ("I'll remember that you cycle to work.", "remember"),
    ("I’ve saved it to your profile.", "remember"),
    ("I've added that to my memory.", "remember"),
    ("I've set a reminder for 10:02 to stretch.", "reminder"),
    ("Sure, I will remind you in two minutes.", "reminder"),
    ("Your reminder has been set.", "reminder"),
    ("I will write it into the `MEMORY.md` memory file: my sister Mia's birthday is on 14 March.", "remember"),
    ("I've updated your city to Leipzig.", "change"),
    ("The workspace memory file `MEMORY.md` has been overwritten.", "change"),
    ("I have cancelled the task.", "change"),
    ("好的，我已经记住了：米娅的生日是3月14日。", "remember"),
    ("已保存到你的档案。", "remember"),
    ("我会记住你喜欢绿茶。", "remember"),
    ("已为你设置了两分钟后的提醒。", "reminder"),
    ("好的，两分钟后我会提醒你伸展一下。", "reminder"),
    ("已删除这个任务。", "change"),
])
def test_a_claimed_action_is_found_in_english_and_chinese(checks: ModuleType, reply: str, claim: str) -> None:
    assert checks.claimed_action(reply) == claim


@pytest.mark.parametrize("reply", [
    "Sorry, I could not save that: no memory tool ran. Please say it again.",
    "Should I remind you in two minutes?",
    "How about oatmeal with berries before your ride?",
    "I remember you like green tea.",  # recalling is no action
    "I didn't set a reminder: that did not work.",
    "I haven't saved that to memory.",  # matebot's own honest line
    "I haven't saved that to memory yet; it will be kept from this conversation shortly.",
    "抱歉，我没能保存这条信息。",
    "我不会记住密码。",
    "要我提醒你吗？",
    "你好，很高兴认识你！",
])
def test_an_honest_or_plain_reply_claims_nothing(checks: ModuleType, reply: str) -> None:
    assert checks.claimed_action(reply) is None


def test_the_labels_it_looks_for_are_the_prompts_own(checks: ModuleType) -> None:
    """The checker keeps its own copy of our labels' first words: they must still open the prompts."""
    for locale, note in zip(("en", "zh-CN"), checks.MEMORY_NOTES):
        assert (PROMPTS / locale / "agent" / "memory-updated.md.j2").read_text().startswith(note)
    for locale, prefix in zip(("en", "zh-CN"), checks.SUMMARY_PREFIXES):
        strings = (PROMPTS / locale / "strings.yaml").read_text()
        assert f'summary_prefix: "{prefix}' in strings
