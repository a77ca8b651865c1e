"""`mate.channels`: Telegram, Discord and the console."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from bot.core.config.base import Section


DmPolicy = Literal["allowlist", "open"]


_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")


class TelegramWebhookConfig(Section):
    # "" = long polling (the default). Else the public https URL Telegram posts updates to; a
    # reverse proxy in front passes them to listen:port. Every daemon of a database can take them.
    url: str = ""
    listen: str = "127.0.0.1"
    port: int = Field(8443, ge=0, le=65535)  # 0: any free port
    secret_token: str = ""  # required with url: Telegram sends it with each update, others are refused

    @model_validator(mode="after")
    def _complete(self) -> TelegramWebhookConfig:
        if not self.url:
            return self
        if not self.url.startswith("https://"):
            raise ValueError("url: Telegram posts only to https:// addresses")
        if not _SECRET_TOKEN.fullmatch(self.secret_token):
            raise ValueError("secret-token: required with url (1-256 letters, digits, _ or -)")
        return self

    @property
    def path(self) -> str:
        """The path updates are posted to (the url's)."""
        return urlsplit(self.url).path or "/"


class TelegramConfig(Section):
    enabled: bool = False
    token: str = ""
    base_url: str | None = None
    webhook: TelegramWebhookConfig = TelegramWebhookConfig()
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
