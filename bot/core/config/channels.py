"""`mate.channels`: Telegram, Discord and the console."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
)

from bot.core.config.base import Section


DmPolicy = Literal["allowlist", "open"]


class TelegramConfig(Section):
    enabled: bool = False
    token: str = ""
    base_url: str | None = None
    admins: tuple[str, ...] = ()
    allowed_users: tuple[str, ...] = ()
    dm_policy: DmPolicy = "allowlist"
    # allowlist: only the groups in allowed_groups are answered (a stranger adding the bot
    # to a group must not spend the owner's credits); open: every group; disabled: none.
    group_policy: Literal["open", "allowlist", "disabled"] = "allowlist"
    allowed_groups: tuple[str, ...] = ()
    require_mention: bool = True

    @field_validator("admins", "allowed_users", "allowed_groups", mode="before")
    @classmethod
    def _ids_as_text(cls, value: Any) -> Any:
        return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else value


class DiscordConfig(Section):
    enabled: bool = False
    token: str = ""
    admins: tuple[str, ...] = ()
    allowed_users: tuple[str, ...] = ()
    allowed_guilds: tuple[str, ...] = ()
    guild_policy: Literal["allowlist", "open"] = "allowlist"  # allowlist: only allowed_guilds
    dm_policy: DmPolicy = "allowlist"
    require_mention: bool = True
    api_base_url: str | None = None
    gateway_url: str | None = None

    @field_validator("admins", "allowed_users", "allowed_guilds", mode="before")
    @classmethod
    def _ids_as_text(cls, value: Any) -> Any:
        return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else value


class ConsoleConfig(Section):
    enabled: bool | Literal["auto"] = "auto"


class ChannelsConfig(Section):
    telegram: TelegramConfig = TelegramConfig()
    discord: DiscordConfig = DiscordConfig()
    console: ConsoleConfig = ConsoleConfig()
    # The longest reply a chat receives, whatever the model writes: past it "… (cut)".
    max_reply_chars: int = Field(20_000, ge=200, le=1_000_000)

    def missing_token(self) -> str | None:
        """The error line for an enabled channel without its token; None when each has one.

        Checked by what starts the channels (`matebot run`), not when the file is read: backup,
        restore, memory, people, tasks and check-config run without the channels' tokens."""
        for name, channel, variable in (("telegram", self.telegram, "TELEGRAM_BOT_TOKEN"),
                                        ("discord", self.discord, "DISCORD_BOT_TOKEN")):
            if channel.enabled and not channel.token:
                return f"mate.channels.{name}.token: required when enabled (set {variable})"
        return None
