"""Names for the web page: a conversation or an agent as a person calls it (person, group, channel), not its id."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.core.prompts import PromptLibrary
from bot.storage import Repositories
from bot.storage.people import OWNER_PERSON_ID, PERSON_BINDING_PREFIX
from bot.core.records import AgentRecord, ConversationRecord, MessageRecord, PersonRecord
from channels.base import parse_chat_key

# Proper names, the same in every language.
_CHANNELS = {"telegram": "Telegram", "discord": "Discord"}
_START_CHARS = 40  # of a web chat's first message, in its name


@dataclass(frozen=True, slots=True)
class NameBook:
    """Who the accounts and people are, read once per answer."""

    prompts: PromptLibrary
    by_account: dict[str, str]  # "telegram:111" -> the person's name
    by_person: dict[int, str]

    @classmethod
    def of(cls, prompts: PromptLibrary, people: list[PersonRecord]) -> NameBook:
        return cls(prompts, {account: p.name for p in people for account in p.accounts},
                   {p.id: p.name for p in people})

    def conversation(self, conversation: ConversationRecord, first: MessageRecord | None) -> str:
        """`first` is the conversation's first user message (None when it has none)."""
        text = self.prompts.text
        channel = conversation.channel
        if channel == "console":
            return text("web_name_console")
        if channel in ("web", "cron"):
            kind = text("web_name_web" if channel == "web" else "web_name_scheduled")
            start = _start(first.content) if first else ""
            return text("web_name_started", kind=kind, start=start) if start else kind
        label = _CHANNELS.get(channel, channel)
        if conversation.is_group:
            return text("web_name_group", title=conversation.title or conversation.chat_key, channel=label)
        sender = first.sender_id if first else None
        person = (self.by_account.get(f"{channel}:{sender}") if sender else None) or (
            first.sender_name if first else None) or conversation.title or conversation.chat_key
        return text("web_name_direct", person=person, channel=label)

    def agent(self, agent: AgentRecord, binding: str | None) -> str:
        """`binding` is the chat key a per-chat or per-person agent belongs to (None: configured)."""
        if binding is None:
            return agent.name
        if binding.startswith(PERSON_BINDING_PREFIX):
            person_id = int(binding.removeprefix(PERSON_BINDING_PREFIX))
            person = self.by_person.get(person_id, str(person_id))
            return self.prompts.text("web_name_agent_person", agent=agent.name, person=person)
        channel, chat_id = parse_chat_key(binding)
        label = _CHANNELS.get(channel, channel)
        if agent.name != binding:  # named after the chat's title: a group
            return self.prompts.text("web_name_group", title=agent.name, channel=label)
        found = self.by_account.get(f"{channel}:{chat_id}")
        return self.prompts.text("web_name_direct", person=found, channel=label) if found else binding


def _start(content: str) -> str:
    words = " ".join(content.split())
    return words if len(words) <= _START_CHARS else words[:_START_CHARS].rstrip() + "…"


async def named_conversations(repos: Repositories, prompts: PromptLibrary, people: list[PersonRecord],
                              conversations: list[ConversationRecord]) -> list[str]:
    """Each conversation's display name, in order."""
    book = NameBook.of(prompts, people)
    names = []
    for conversation in conversations:
        first = None
        if conversation.channel != "console" and not conversation.is_group:  # the rest need no message
            found = await repos.messages.oldest(conversation.id, 1, roles=("user",))
            first = found[0] if found else None
        names.append(book.conversation(conversation, first))
    return names


async def named_agents(repos: Repositories, prompts: PromptLibrary, people: list[PersonRecord]) -> list[dict[str, Any]]:
    """Every agent as the page's agent box lists it: {agentId, name, displayName, personId}."""
    book = NameBook.of(prompts, people)
    agents = await repos.agents.list()
    bindings = await repos.agents.bound_to_chats([a.id for a in agents])
    listed = []
    for agent in agents:
        binding = bindings.get(agent.id)
        person_id = (int(binding.removeprefix(PERSON_BINDING_PREFIX))
                     if binding and binding.startswith(PERSON_BINDING_PREFIX) else None)
        if agent.id == 1:
            person_id = OWNER_PERSON_ID  # the owner's agent is theirs without a binding
        listed.append({"agentId": agent.id, "name": agent.name, "displayName": book.agent(agent, binding),
                       "personId": person_id, "chatKey": binding})
    return listed
