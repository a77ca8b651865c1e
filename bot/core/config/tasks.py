"""`mate.tasks`: reminders and scheduled tasks."""

from __future__ import annotations


from pydantic import (
    Field,
)

from bot.core.config.base import Section


class TasksConfig(Section):
    """Reminders and scheduled tasks people ask for in a chat."""

    max_per_chat: int = Field(25, ge=1, le=10000)  # live tasks one chat may hold
    min_interval_minutes: float = Field(15, ge=1)  # a repeating task runs at most this often
    # A task the daemon was down for runs once at start-up when at most this late; later,
    # it is skipped and the chat's next reply mentions it.
    catch_up_minutes: float = Field(120, ge=0)
    group_members_may_schedule: bool = False  # in groups: admins only, or every member
