"""What a memory extraction request is sent with besides its messages: its own prompt, or the chat's cached prefix.

Sharing the chat's prefix (bot/llm/chat_prefix.py): the same model, tools and system
prompt byte for byte, so the provider reads them from its cache, with the tools not callable
and the extraction's instructions in the user message. The memory files are the ones that
system prompt shows (the conversation's snapshot); lines changed since are listed with the
instructions, as the chat's "memory updated" block lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bot.core.config import MateConfig, MemoryConfig
from bot.llm.chat_prefix import ChatPrefix
from bot.llm.memory_snapshot import MAX_NOTE_CHARS, FileChange, injected_files, memory_changes
from bot.llm.port import CacheTtl, LLMRequest
from bot.core.prompts import PromptLibrary


@dataclass(frozen=True, slots=True)
class ExtractionFrame:
    model: str
    system: str
    split: int = 0
    tools: list[dict[str, Any]] = field(default_factory=list)
    ttl: CacheTtl = "5m"
    shared: bool = False  # the chat's prefix: the files are in `system`, as the snapshot holds them
    changes: tuple[FileChange, ...] = ()  # shared: the files' lines changed since the snapshot
    unshown: tuple[str, ...] = ()  # shared: files the system prompt does not show (blank or disabled then)

    def request(self, messages: list[dict[str, Any]], max_tokens: int) -> LLMRequest:
        return LLMRequest(model=self.model, system=self.system, messages=messages, max_tokens=max_tokens,
                          purpose="memory", tools=self.tools, system_split=self.split, cache_ttl=self.ttl,
                          tool_choice="none" if self.shared else "auto")


def shares_chat_prompt(config: MateConfig) -> bool:
    """`memory.extraction-prompt`: chat, own, or (auto) chat on Anthropic's own API only."""
    choice = config.memory.extraction_prompt
    return choice == "chat" or (choice == "auto" and config.llm.reaches_anthropic)


def shared_frame(prefix: ChatPrefix, files: dict[str, str]) -> ExtractionFrame | None:
    """The chat's prefix as an extraction frame for `files` (name -> current text), or None
    when what changed since its snapshot is too much to list (then the extraction's own
    prompt costs about the same and shows the files whole)."""
    shown = injected_files(prefix.system, prefix.split)
    changes = memory_changes({name: shown.get(name, "") for name in files}, files)
    listed = sum(len(line) + 12 for change in changes for line in (*change.added, *change.removed))
    if listed > MAX_NOTE_CHARS:
        return None
    return ExtractionFrame(prefix.model, prefix.system, prefix.split, prefix.tools, prefix.ttl, shared=True,
                           changes=tuple(changes), unshown=tuple(name for name in files if name not in shown))


def own_frame(prompts: PromptLibrary, memory: MemoryConfig, model: str, is_group: bool) -> ExtractionFrame:
    """The extraction's own prompt: its instructions as the system prompt (a group's or a direct chat's)."""
    budgets = {"memory_max_chars": memory.memory_max_chars, "daily_entry_max_chars": memory.daily_entry_max_chars}
    if is_group:
        return ExtractionFrame(model, prompts.render("memory/summarize-group-system",
                                                     person_max_chars=memory.person_max_chars, **budgets))
    return ExtractionFrame(model, prompts.render("memory/summarize-system", profile_max_chars=memory.profile_max_chars,
                                                 **budgets))
