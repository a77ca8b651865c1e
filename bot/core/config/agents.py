"""`mate.agents`, `mate.routing`, `mate.people` and `mate.agent`: who answers whom, and the window."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    field_validator,
)

from bot.core.config.base import Section


class AgentEntry(Section):
    id: int = Field(ge=1)
    name: str = "Mate"


class RouteRule(Section):
    channel: str = "*"
    chat: str = "*"
    # per-chat: each group its own agent; per-person: the owner agent 1, everyone else their own
    agent: int | Literal["per-chat", "per-person"] = 1


PERSON_CHANNELS = ("telegram", "discord", "console")  # where a person writes from with an account id


class PersonEntry(Section):
    """One person's accounts on several channels, linked so they reach one agent and one memory."""

    name: str = Field(min_length=1, max_length=80)
    ids: tuple[str, ...] = Field(min_length=1)

    @field_validator("ids")
    @classmethod
    def _channel_and_id(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for account in value:
            channel, _, sender = account.partition(":")
            if not channel or not sender.strip():
                raise ValueError(f"{account!r} is not <channel>:<id> (for example telegram:123456)")
            if channel not in PERSON_CHANNELS:
                raise ValueError(f"{account!r}: the channel is one of {', '.join(PERSON_CHANNELS)}")
        return value


# Under the hour a warm entry lives, with room for the request to arrive in time.
QUIET_FOLD_MINUTES = 50.0


class WindowConfig(Section):
    default_max_input_tokens: int = Field(128000, ge=256)
    compact_trigger_ratio: float = Field(0.75, gt=0, le=1)
    # The conversation (summary + history + the new message) is folded past this, whatever the
    # model's limit: every request pays for the whole history, so it stays short (SPEC S32).
    working_tokens: int = Field(24000, ge=256)
    preserve_recent_pairs: int = Field(2, ge=0, le=50)
    summary_max_tokens: int = Field(300, ge=16)
    summary_cache_minutes: float = Field(30, ge=0)
    # A direct conversation quiet this long is folded through its still-warm prompt cache, so
    # the next session does not write the whole history to the cache again (0: never). auto:
    # on a hosted Messages API only, where a cache entry lives as long as it was asked to. A
    # server on this machine or network bills nothing for its cache (and a small model's summary
    # loses more than it saves); an OpenAI-compatible provider keeps its cache as long as it likes
    # (on the day bench the folds there saved under 3 %).
    # At most 59: a cache entry written for the hour is gone after that.
    fold_after_quiet_minutes: Literal["auto"] | Annotated[float, Field(ge=0, le=59)] = "auto"

    def quiet_fold_minutes(self, hosted_messages_api: bool) -> float:
        if self.fold_after_quiet_minutes == "auto":
            return QUIET_FOLD_MINUTES if hosted_messages_api else 0.0
        return self.fold_after_quiet_minutes


class ConversationConfig(Section):
    window: WindowConfig = WindowConfig()


class AgentConfig(Section):
    conversation: ConversationConfig = ConversationConfig()
    max_tool_rounds: int = Field(8, ge=0, le=100)
