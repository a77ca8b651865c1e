"""A group's people one by one, for a model that holds little context (SPEC S34).

A small local model asked for the whole group at once often keeps nothing at all, or only each
person's first fact, or copies the transcript. Asked about one person, from that person's own
lines only, it lists their facts well; those the group answer did not write are added.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.core.content.messages import decode_content, plain_text
from bot.core.errors import LLMError
from bot.core.prompts import PromptLibrary
from bot.core.records import MessageRecord
from bot.llm import LLMClient
from bot.llm.port import LLMRequest
from memory.extraction.edits import is_example_filler
from memory.extraction.people_profiles import Member
from memory.extraction.resolve import Plan

log = logging.getLogger(__name__)

# One person's facts: a short list.
FACTS_MAX_TOKENS = 300
# Less than this said by a person ("hi", "ok") holds no fact worth a call.
MIN_CHARS = 20
NONE_ANSWER = "NONE"


@dataclass(frozen=True, slots=True)
class PersonLines:
    """What one member said in the batch, in order."""

    member: Member
    lines: tuple[str, ...]

    @property
    def worth_asking(self) -> bool:
        return sum(len(line) for line in self.lines) >= MIN_CHARS


def lines_by_member(batch: Sequence[MessageRecord], members: Sequence[Member]) -> list[PersonLines]:
    """Each member's own messages in the batch (without the "[Name] " a group row starts with)."""
    said: dict[str, list[str]] = {m.sender_id: [] for m in members}
    for message in batch:
        if message.role != "user" or message.sender_id not in said:
            continue
        text = " ".join(plain_text(decode_content(message.content, message.content_format)).split())
        name = message.sender_name or message.sender_id or ""
        if text.startswith(f"[{name}] "):
            text = text[len(name) + 3:]
        if text:
            said[message.sender_id].append(text)
    return [PersonLines(m, tuple(said[m.sender_id])) for m in members]


def facts_of(answer: str) -> list[str]:
    """The "- fact" lines of an answer; none for NONE, a copied example or anything else."""
    found: list[str] = []
    for raw in answer.splitlines():
        line = raw.strip()
        if not line.startswith(("- ", "* ")) or is_example_filler(line):
            continue
        fact = line[2:].strip()
        if fact and fact.upper() != NONE_ANSWER and fact not in found:
            found.append(fact)
    return found


def with_facts(current: str, title: str, facts: Sequence[str]) -> str | None:
    """`current` (a profile; its title when it is new) with the facts it does not hold yet."""
    base = current.strip() or title
    held = base.casefold()
    new = [f for f in facts if f.casefold() not in held]
    if not new:
        return None
    bullets = "\n".join(f"- {f}" for f in new)
    separator = "\n\n" if base.strip() == title else "\n"
    return f"{base.rstrip()}{separator}{bullets}\n"


class PeopleOneByOne:
    """Asks the memory model about each member who said enough, one by one."""

    def __init__(self, llm: LLMClient, prompts: PromptLibrary, model: str) -> None:
        self._llm = llm
        self._prompts = prompts
        self._model = model

    async def fill(self, plan: Plan, people: Sequence[PersonLines], profiles: Mapping[str, str]) -> int:
        """Adds to `plan` each member's facts it does not hold yet; the number of calls made.
        A call that fails changes nothing: the group answer stands as it was."""
        calls = 0
        for person in people:
            member = person.member
            if not person.worth_asking:
                continue
            calls += 1
            try:
                answer = await self._ask(person)
            except LLMError as exc:
                log.info("asking the memory model about %s alone failed: %s", member.ref, exc)
                continue
            current = plan.contents.get(member.filename, profiles.get(member.filename, ""))
            updated = with_facts(current, f"# {member.name}", facts_of(answer))
            if updated is not None:
                plan.contents[member.filename] = updated
                plan.should_update = True
        if calls:
            plan.notes.append(f"asked about {calls} member(s) one by one")
        return calls

    async def _ask(self, person: PersonLines) -> str:
        name = person.member.name
        request = LLMRequest(
            model=self._model, system=self._prompts.render("memory/person-facts-system"),
            messages=[{"role": "user", "content": self._prompts.render(
                "memory/person-facts-user", person=name, lines="\n".join(person.lines))}],
            max_tokens=FACTS_MAX_TOKENS, purpose="memory")
        response = await self._llm.complete(request)
        return response.text
