"""The conversation window's test setup: a small budget, a model answering summaries and chats from two queues,
the S5 estimate."""

from __future__ import annotations

from collections import deque
from typing import Any

from bot.llm.tokens import PER_MESSAGE_OVERHEAD, TokenEstimator
from bot.app.runtime import Runtime
from channels.base import InboundMessage
from tests.support.fakes.anthropic import RecordedRequest, Script, TextReply, system_text


CID = "console:me"
BUDGET = 2850  # room for the tool definitions (eight for the owner: memory and tasks) and the seeded workspace
RATIO = 0.75
TRIGGER = int(BUDGET * RATIO)
SUMMARY_1 = "SUMMARY-ONE: the user likes zebras."
SUMMARY_2 = "SUMMARY-TWO: zebras and yaks were discussed."


class ScriptedModel:
    """Responder: summary requests and chat requests from separate queues.

    Every reply reports usage input_tokens=0, which the calibration ignores, so the
    factor stays 1.0 and the thresholds computed by the tests are exact.
    """

    def __init__(self, rt: Runtime) -> None:
        window = rt.core.config.mate.agent.conversation.window
        self.summary_system = rt.core.prompts.render(
            "context/conversation-summary-system", max_tokens=window.summary_max_tokens)
        self.summaries: deque[Script] = deque()
        self.chats: deque[Script] = deque()
        self.summary_requests: list[dict[str, Any]] = []
        self.chat_requests: list[dict[str, Any]] = []

    def __call__(self, recorded: RecordedRequest) -> Script | None:
        if recorded.path != "/v1/messages":
            return None
        if system_text(recorded.body) == self.summary_system:
            self.summary_requests.append(recorded.body)
            return self.summaries.popleft() if self.summaries else TextReply("a summary", input_tokens=0)
        self.chat_requests.append(recorded.body)
        n = len(self.chat_requests)
        return self.chats.popleft() if self.chats else TextReply(f"ans-{n:02d}", input_tokens=0)


def window_config(pairs: int = 2, budget: int = BUDGET) -> dict[str, Any]:
    return {"conversation": {"window": {
        "default-max-input-tokens": budget, "compact-trigger-ratio": RATIO, "preserve-recent-pairs": pairs}}}


async def blank_workspace(rt: Runtime, agent_id: int = 1) -> None:
    """Empty core files keep the system prompt small and stable."""
    for name in ("AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"):
        await rt.core.workspace.write(agent_id, name, "")


def sized(tokens: TokenEstimator, n: int, tag: str) -> str:
    """A text of exactly n tokens starting with tag."""
    base = tokens.count_text(tag)
    assert n >= base
    text = tag + " w" * (n - base)
    assert tokens.count_text(text) == n
    return text


def owner_tools(rt: Runtime) -> list[dict[str, Any]]:
    """The tools of the owner's console turn: the agent's own, then the task tools the owner gets."""
    from bot.schedule.reminders.tool import TurnTaskTools

    console = InboundMessage("console", "me", "me", "me", "")
    return rt.agent.tool_definitions(TurnTaskTools(rt.tasks, rt.core.prompts).tools_for(console))


async def estimate_without_current(rt: Runtime, conversation_id: str = CID) -> int:
    """What S5 counts before the current message: system + injection + tools + summary + history."""
    system = await rt.agent.system_prompt(1, "Mate")
    total = rt.tokens.count_text(system) + rt.tokens.count_tools(owner_tools(rt))
    conversation = await rt.core.repos.conversations.get(conversation_id)
    assert conversation is not None
    if conversation.summary:
        total += rt.tokens.count_message(rt.window.summary_message(conversation.summary))
    history = await rt.core.repos.messages.after(conversation_id, conversation.summary_upto_message_id)
    return total + sum(r.token_count + PER_MESSAGE_OVERHEAD for r in history)
