"""The whole tree: `mate` and its smaller sections (database, log, api)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from bot.core.config.agents import AgentConfig, AgentEntry, PersonEntry, RouteRule
from bot.core.config.base import Section, is_loopback
from bot.core.config.channels import ChannelsConfig
from bot.core.config.llm import LlmConfig
from bot.core.config.media import MediaConfig
from bot.core.config.memory import MemoryConfig
from bot.core.config.tasks import TasksConfig


class DatabaseConfig(Section):
    # The SQLite file, unless storage.url names another database; its folder holds matebot's
    # other data (media, the API token) whichever database is used.
    path: str = "data/mate.db"


class StorageConfig(Section):
    # "" = SQLite at database.path; sqlite:///relative/path, sqlite:////absolute/path, or
    # postgresql://user:password@host:port/database (several daemons may share one).
    url: str = ""

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        value = value.strip()
        if value and not value.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError("must start with sqlite:/// or postgresql:// (or be empty for SQLite at database.path)")
        if value.startswith("sqlite:///") and not value.removeprefix("sqlite:///"):
            raise ValueError("sqlite:/// needs a file path after it, e.g. sqlite:///data/mate.db")
        return value

    @property
    def postgres(self) -> bool:
        return self.url.startswith(("postgresql://", "postgres://"))

    def sqlite_path(self, default: str) -> str:
        """The SQLite file: the url's path (sqlite:////abs keeps its leading slash), else `default`."""
        return self.url.removeprefix("sqlite:///") if self.url.startswith("sqlite:///") else default


LogLevel = Literal["debug", "info", "warning", "error"]


class LogConfig(Section):
    # "" writes no log file; a relative path is taken from the working directory.
    file: str = "data/matebot.log"
    # None: info, and warning on the terminal while the console chat is open.
    level: LogLevel | None = None


class ApiConfig(Section):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    token: str = ""  # empty: one is generated on first start and kept in data/api-token

    @field_validator("token")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if value and not value.strip():
            raise ValueError("must not be blank (leave it empty to have one generated)")
        return value


class MateConfig(Section):
    timezone: str = "local"
    locale: Literal["en", "zh-CN"] = "en"
    database: DatabaseConfig = DatabaseConfig()
    storage: StorageConfig = StorageConfig()
    llm: LlmConfig = LlmConfig()
    agents: tuple[AgentEntry, ...] = (AgentEntry(id=1, name="Mate"),)
    routing: tuple[RouteRule, ...] = (
        RouteRule(channel="*", chat="direct", agent="per-person"),
        RouteRule(channel="*", chat="group", agent="per-chat"),
    )
    people: tuple[PersonEntry, ...] = ()
    agent: AgentConfig = AgentConfig()
    # Start-up answers user messages left without a reply (the process stopped mid-reply)
    # if they are at most this many minutes old; 0 turns it off.
    recovery_minutes: float = Field(10, ge=0)
    # On SIGTERM/SIGINT: how long replies in flight may take to finish; the daemon is gone
    # at most 5 s after that.
    shutdown_drain_seconds: float = Field(30, ge=0, le=3600)
    memory: MemoryConfig = MemoryConfig()

    @property
    def sqlite_file(self) -> str:
        """The SQLite database file: storage.url's (sqlite:///…) or database.path."""
        return self.storage.sqlite_path(self.database.path)
    media: MediaConfig = MediaConfig()
    tasks: TasksConfig = TasksConfig()
    channels: ChannelsConfig = ChannelsConfig()
    api: ApiConfig = ApiConfig()
    log: LogConfig = LogConfig()

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        if value != "local":
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @field_validator("agents", mode="before")
    @classmethod
    def _default_agent(cls, value: Any) -> Any:
        return value or [{"id": 1, "name": "Mate"}]

    @model_validator(mode="after")
    def _unique_agent_ids(self) -> MateConfig:
        ids = [a.id for a in self.agents]
        if len(ids) != len(set(ids)):
            raise ValueError("agents: ids must be unique")
        for index, rule in enumerate(self.routing):
            if isinstance(rule.agent, int) and rule.agent not in ids:
                raise ValueError(f"routing.{index}.agent: agent {rule.agent} is not configured in mate.agents")
            if rule.agent == "per-person" and 1 not in ids:
                raise ValueError(f"routing.{index}.agent: per-person sends the owner to agent 1, "
                                 "which is not configured in mate.agents")
            if rule.agent == "per-person" and rule.chat != "direct":
                # A group has one agent: per person it would hop between members' agents.
                raise ValueError(f"routing.{index}.agent: per-person is for direct chats only (chat: direct); "
                                 f"a rule for chat: {rule.chat} needs an agent id or per-chat")
        owners: dict[str, int] = {}
        for index, person in enumerate(self.people):
            for account in person.ids:
                if account in owners and owners[account] != index:
                    raise ValueError(f"people: {account} is listed for {self.people[owners[account]].name!r} "
                                     f"and for {person.name!r}; an account belongs to one person")
                owners[account] = index
        admins = {f"telegram:{a}" for a in self.channels.telegram.admins} | {
            f"discord:{a}" for a in self.channels.discord.admins}
        owner_entries = [p.name for p in self.people if admins & set(p.ids)]
        if len(owner_entries) > 1:
            raise ValueError(f"people: {' and '.join(repr(n) for n in owner_entries)} both list an admin id; "
                             "the owner is one person: list all of your accounts in one entry")
        if self.api.enabled and not self.api.token and not is_loopback(self.api.host):
            raise ValueError("api.token: required when api.host is not a loopback address")
        return self


class Config(Section):
    mate: MateConfig = MateConfig()
    source: str = Field("<defaults>", exclude=True)
