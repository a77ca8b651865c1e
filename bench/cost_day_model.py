"""DayModel: the scripted model of the day bench — answers each request as a careful model would, and says what it was for."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

from bench._common import sentence
from tests.support.fakes.anthropic import RecordedRequest, Script, TextReply, ToolUseReply, system_text
from tests.support.fakes.openai_chat import PATH as CHAT_COMPLETIONS, messages_view

# What a request is for, told by the daemon's own prompts (locale en, the bench's config).
CHAT, EXTRACTION, COMPACTION, EMERGENCE = "chat", "extraction", "compaction", "emergence"
PURPOSES = (CHAT, EXTRACTION, COMPACTION, EMERGENCE)
_EXTRACTION_MARK = "You maintain the long-term memory of a chat assistant"
_EMERGENCE_MARK = "You consolidate the long-term memory of a chat assistant"  # the consolidation service
_COMPACTION_MARK = "You compress the earlier part of a conversation"
_REVIEW_MARK = "Scheduled memory review."  # the nightly job's trigger, answered through the agent's tools

_DAILY_NOTE = re.compile(r"memory/\d{4}-\d{2}-\d{2}\.md")
_TODAY = re.compile(r"Today's date: (\d{4}-\d{2}-\d{2})")
_MEMORY_BLOCK = re.compile(r"--- MEMORY\.md ---\n(.*?)(?=\n\n--- |\Z)", re.S)
REVIEW_KEEPS = 0.60  # the review condenses MEMORY.md to this share of its budget ...
REVIEW_ABOVE = 0.70  # ... once it is fuller than this


@dataclass(frozen=True, slots=True)
class PlantedFact:
    """A fact said in a user message; where a careful model keeps it: profile | memory | daily."""

    text: str
    kind: str


@dataclass(frozen=True, slots=True)
class Answered:
    """One messages request as the fake saw it and what it was for."""

    request: RecordedRequest
    purpose: str


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False) if content else ""


def _between(text: str, tag: str) -> str:
    start, end = text.find(f"<{tag}>"), text.find(f"</{tag}>")
    return text[start + len(tag) + 2:end] if 0 <= start < end else ""


class DayModel:
    """A FakeAnthropic (or FakeOpenAIChat) responder for the whole day.

    - chat: an answer of 60-150 words;
    - extraction: the JSON of the memory prompt, one daily bullet per planted fact it has not
      recorded yet, and an append to PROFILE.md / MEMORY.md for the durable ones (the edits
      form: the files are well filled);
    - compaction: a summary of about 150 words;
    - the nightly review (the daemon's default: the agent with its tools): list the daily
      notes, read the newest seven in one reply, then one edit of MEMORY.md (drop its oldest
      bullets down to 60 % of the budget once it is over 70 %, else add one consolidated line),
      then one short line;
    - the consolidation service (when configured instead): nothing to change.
    """

    def __init__(self, rng: random.Random, facts: dict[str, PlantedFact], memory_budget: int) -> None:
        # One stream per purpose: the chat's answers stay the same whatever else the daemon asks
        # (a change that adds or drops a memory call must not re-draw the day's answers).
        self._chat_rng = random.Random(rng.random())
        self._summary_rng = random.Random(rng.random())
        self._facts = facts  # planted, by text; a fact leaves when it is recorded
        self._memory_budget = memory_budget
        self.answered: list[Answered] = []
        self.files_changed = 0  # extractions that changed PROFILE.md or MEMORY.md

    def respond(self, request: RecordedRequest) -> Script:
        purpose, script = self._answer(request)
        self.answered.append(Answered(request, purpose))
        return script

    def _answer(self, request: RecordedRequest) -> tuple[str, Script]:
        body = messages_view(request.body) if request.path == CHAT_COMPLETIONS else request.body
        system = system_text(body)
        messages = body.get("messages") or []
        first = _text(messages[0].get("content")) if messages else ""
        if _EXTRACTION_MARK in system or _EXTRACTION_MARK in first:  # its own prompt, or the chat's prefix
            return EXTRACTION, TextReply(json.dumps(self._extraction(first), ensure_ascii=False))
        if _EMERGENCE_MARK in system:
            return EMERGENCE, TextReply(json.dumps({"should_update": False, "reason": "nothing new to fold in",
                                                    "memory_content": ""}))
        last = _text(messages[-1].get("content")) if messages else ""
        if _COMPACTION_MARK in system or _COMPACTION_MARK in last:  # its own prompt, or after the chat's
            return COMPACTION, TextReply(sentence(self._summary_rng, 150))
        if _REVIEW_MARK in first:
            return EMERGENCE, self._review(system, messages)
        return CHAT, TextReply(sentence(self._chat_rng, self._chat_rng.randint(60, 150)))

    def _extraction(self, prompt: str) -> dict[str, Any]:
        transcript = _between(prompt, "transcript")
        found = [fact for text, fact in self._facts.items() if text in transcript]
        if not found:
            return {"should_update": False, "reason": "small talk only", "daily_entry": "",
                    "memory_update": "", "profile_update": ""}
        for fact in found:
            del self._facts[fact.text]
        match = _TODAY.search(prompt)
        today = match.group(1) if match else ""
        reply: dict[str, Any] = {
            "should_update": True, "reason": f"{len(found)} new facts worth keeping",
            "daily_entry": "\n".join(f"- {fact.text}" for fact in found),
            "memory_update": "", "profile_update": "",
        }
        for kind in ("profile", "memory"):
            edits = [{"append": f"- {today}: {fact.text}"} for fact in found if fact.kind == kind]
            if edits:
                reply[f"{kind}_edits"] = edits
        self.files_changed += any(f"{kind}_edits" in reply for kind in ("profile", "memory"))
        return reply

    def _review(self, system: str, messages: list[dict[str, Any]]) -> Script:
        before = messages[-2].get("content") if len(messages) > 1 else None
        called = [block.get("name") for block in (before if isinstance(before, list) else [])
                  if isinstance(block, dict) and block.get("type") == "tool_use"]
        if not called:
            return ToolUseReply("list_workspace_memory_files", {"agentId": 1, "filenamePrefix": "memory/"})
        if called[0] == "list_workspace_memory_files":
            notes = sorted(set(_DAILY_NOTE.findall(_text(messages[-1].get("content")))), reverse=True)[:7]
            if not notes:
                return TextReply("No daily notes to consolidate.")
            reads = [("read_workspace_memory_file", {"agentId": 1, "filename": name}) for name in notes]
            return ToolUseReply(reads[0][0], reads[0][1], more=tuple(reads[1:]))
        if called[0] == "read_workspace_memory_file":
            edit = self._memory_edit(system, _text(messages[-1].get("content")))
            if edit is None:
                return TextReply("Nothing needed to change.")
            return ToolUseReply("edit_workspace_memory_file", {"agentId": 1, "filename": "MEMORY.md", **edit})
        return TextReply("Folded this week's notes into MEMORY.md and dropped the oldest points.")

    def _memory_edit(self, system: str, notes: str) -> dict[str, str] | None:
        match = _MEMORY_BLOCK.search(system)
        memory = match.group(1) if match else ""
        lines = memory.splitlines()
        bullets = [i for i, line in enumerate(lines) if line.startswith("- ") and memory.count(line) == 1]
        if not bullets:
            return None
        if len(memory) > self._memory_budget * REVIEW_ABOVE:
            first = bullets[0]
            last, dropped = first, 0
            while last < len(lines) and len(memory) - dropped > self._memory_budget * REVIEW_KEEPS:
                dropped += len(lines[last]) + 1
                last += 1
            return {"oldText": "\n".join(lines[first:last]) + "\n", "newText": ""}
        newest = re.search(r"- ([^\n\\]+)", notes)
        line = lines[bullets[-1]]
        point = newest.group(1)[:160] if newest else "a quiet week"
        return {"oldText": line, "newText": f"{line}\n- This week: {point}"}
