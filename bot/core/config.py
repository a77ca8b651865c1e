"""Load config.yaml into one frozen, validated Config tree (SPEC S2)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from bot.core.errors import ConfigError

DEFAULT_MODEL = "claude-sonnet-5-5"
SECRET_KEYS = frozenset({"api-key", "token"})


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=_kebab, populate_by_name=True
    )


class DatabaseConfig(_Model):
    path: str = "data/mate.db"


LlmApi = Literal["anthropic", "openai"]


def _whole_number(value: object) -> int | None:
    """An int as the file may give it (`2`, or `"2"` after ${ENV} substitution); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


class LlmConfig(_Model):
    provider: Literal["auto", "anthropic", "offline"] = "auto"
    # The protocol: the Anthropic Messages API or OpenAI-compatible Chat Completions; `auto`
    # is resolved when the file is read (openai when only OPENAI_API_KEY is set), see resolve_api;
    # with neither key in the environment it stays `auto` and speaks anthropic.
    api: Literal["auto", "anthropic", "openai"] = "anthropic"
    model: str = DEFAULT_MODEL
    memory_model: str | None = None
    api_key: str = ""
    base_url: str = ""
    max_output_tokens: int = Field(2048, ge=1, le=128000)
    timeout_seconds: float = Field(120, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    max_concurrency: int = Field(32, ge=1, le=1000)
    # The model server's parallel slots (llama.cpp: its -np): chat and memory share them, a
    # waiting chat turn before any memory call. None: max-concurrency.
    slots: int | None = Field(None, ge=1, le=1000)
    stream: bool = True
    # A reply that is only a JSON tool call written as text runs as that call (small local
    # models do not emit native tool calls); auto = on when base_url points elsewhere.
    text_tool_calls: Literal["auto", "on", "off"] = "auto"
    # Prompt caching: auto = the 1-hour cache while a conversation is active (a turn within the
    # hour), the 5-minute one otherwise; 5m / 1h always that lifetime; off = no cache_control.
    cache: Literal["auto", "5m", "1h", "off"] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _slots_bound_concurrency(cls, data: Any) -> Any:
        """No more calls are in flight than the server has slots: max-concurrency becomes the smaller
        of the two, so the one limit every client applies is the right one."""
        if not isinstance(data, dict):
            return data
        slots = _whole_number(data.get("slots"))
        if slots is None or not 1 <= slots <= 1000:
            return data  # unset, or the field's own check reports it
        key = "max_concurrency" if "max_concurrency" in data else "max-concurrency"
        limit = _whole_number(data.get(key, cls.model_fields["max_concurrency"].default))
        if limit is not None and limit > slots:
            data = {**data, key: slots}
        return data

    @model_validator(mode="after")
    def _key_for_anthropic(self) -> LlmConfig:
        if self.provider == "anthropic" and not self.api_key.strip():
            raise ValueError(f"api-key: required when provider is anthropic (set {' or '.join(self.key_variables)})")
        return self

    @property
    def protocol(self) -> LlmApi:
        """The protocol spoken to the model; `auto` left unresolved (no environment) means anthropic."""
        return "openai" if self.api == "openai" else "anthropic"

    @property
    def key_variables(self) -> tuple[str, ...]:
        """The environment variables this protocol's key is read from: both while `auto` is unresolved."""
        if self.api == "auto":
            return ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")
        return ("OPENAI_API_KEY",) if self.api == "openai" else ("ANTHROPIC_API_KEY",)

    @property
    def call_slots(self) -> int:
        """Model calls in flight at once (slots, when set, already bounds max-concurrency)."""
        return self.max_concurrency

    @property
    def effective_memory_model(self) -> str:
        return self.memory_model or self.model

    @property
    def uses_anthropic(self) -> bool:
        """A model is used (whichever protocol); False: the offline client answers."""
        if self.provider == "auto":  # a local server (base-url) needs no key
            return bool(self.api_key or self.base_url.strip())
        return self.provider == "anthropic"

    @property
    def reaches_anthropic(self) -> bool:
        """Anthropic's own Messages API: no `base-url`, or one on anthropic.com."""
        if self.protocol != "anthropic":
            return False
        if not self.base_url.strip():
            return True
        try:
            host = (urlsplit(self.base_url.strip()).hostname or "").lower()
        except ValueError:
            return False
        return host == "anthropic.com" or host.endswith(".anthropic.com")

    @property
    def parses_text_tool_calls(self) -> bool:
        if self.text_tool_calls == "auto":
            return bool(self.base_url.strip())
        return self.text_tool_calls == "on"


class AgentEntry(_Model):
    id: int = Field(ge=1)
    name: str = "Mate"


class RouteRule(_Model):
    channel: str = "*"
    chat: str = "*"
    # per-chat: each group its own agent; per-person: the owner agent 1, everyone else their own
    agent: int | Literal["per-chat", "per-person"] = 1


PERSON_CHANNELS = ("telegram", "discord", "console")  # where a person writes from with an account id


class PersonEntry(_Model):
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


class WindowConfig(_Model):
    default_max_input_tokens: int = Field(128000, ge=256)
    compact_trigger_ratio: float = Field(0.75, gt=0, le=1)
    # The conversation (summary + history + the new message) is folded past this, whatever the
    # model's limit: every request pays for the whole history, so it stays short (SPEC S32).
    working_tokens: int = Field(24000, ge=256)
    preserve_recent_pairs: int = Field(2, ge=0, le=50)
    summary_max_tokens: int = Field(300, ge=16)
    summary_cache_minutes: float = Field(30, ge=0)


class ConversationConfig(_Model):
    window: WindowConfig = WindowConfig()


class AgentConfig(_Model):
    conversation: ConversationConfig = ConversationConfig()
    max_tool_rounds: int = Field(8, ge=0, le=100)


def http_address(value: str) -> str:
    """An endpoint's base URL, checked: http(s), a host, a valid port."""
    from urllib.parse import urlsplit

    value = value.strip()
    try:
        parts = urlsplit(value)
        _ = parts.port  # a port out of range or not a number raises ValueError
    except ValueError:
        raise ValueError("must be an http:// or https:// address") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// address, e.g. http://127.0.0.1:8080/v1")
    return value


class _EndpointConfig(_Model):
    """An OpenAI-compatible endpoint: its address (as the openai SDK takes it) and key."""

    base_url: str
    api_key: str = ""  # empty: a local server that wants none

    @field_validator("base_url")
    @classmethod
    def _http_address(cls, value: str) -> str:
        return http_address(value)


class TranscriptionConfig(_EndpointConfig):
    """A speech-to-text endpoint (POST <base-url>/audio/transcriptions) for voice notes."""

    model: str = "whisper-1"
    language: str | None = None  # ISO-639-1 ("en", "zh"); None: the server detects it

    @field_validator("model")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name the transcription model, e.g. whisper-1")
        return value.strip()

    @field_validator("language")
    @classmethod
    def _language_code(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not re.fullmatch(r"[A-Za-z]{2,3}", value.strip()):
            raise ValueError("must be a language code such as en or zh")
        return value.strip().lower()


class MediaConfig(_Model):
    """Images, files and voice notes people send: how large, how many per message."""

    max_file_mb: float = Field(10, gt=0, le=30)
    max_files: int = Field(5, ge=1, le=20)
    max_audio_minutes: float = Field(10, gt=0, le=240)  # longer voice notes and audio are refused
    # None: voice notes get a line saying how to turn transcription on.
    transcription: TranscriptionConfig | None = None


class EmbeddingsConfig(_EndpointConfig):
    """An embeddings endpoint (POST <base-url>/embeddings) for semantic search."""

    model: str

    @field_validator("model")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name the embedding model")
        return value.strip()


class MemoryConfig(_Model):
    auto_summarize_enabled: bool = True
    min_messages_for_summarize: int = Field(4, ge=0)
    min_user_message_length: int = Field(10, ge=0)
    skip_cron_conversations: bool = True
    summary_max_tokens: int = Field(1000, ge=16)
    max_transcript_messages: int = Field(30, ge=1)
    max_transcript_message_chars: int = Field(2000, ge=16)
    cooldown_minutes: float = Field(5, ge=0)
    # An exchange's extraction waits until its conversation was quiet this long (0: right after
    # the exchange); max-transcript-messages unanalysed messages, a compaction folding them, /new
    # and an explicit "remember" run it at once. A local model then answers the person first.
    idle_minutes: float = Field(10, ge=0)
    emergence_enabled: bool = True
    emergence_day_range: int = Field(7, ge=1)
    emergence_cron: str = "0 2 * * *"
    profile_max_chars: int = Field(4000, ge=1)
    memory_max_chars: int = Field(12000, ge=1)
    daily_entry_max_chars: int = Field(2000, ge=16)
    daily_context_chars: int = Field(4000, ge=0)
    # A day's note stops growing here; further entries go to memory/YYYY-MM-DD-2.md and on,
    # so each extraction writes (and the search index reads again) a bounded text.
    daily_note_max_chars: int = Field(20000, ge=1000)
    # A group's agent keeps one profile per member (people/<channel>-<id>.md) of at most
    # this many characters, and shows the model those of the newest senders, at most this many.
    person_max_chars: int = Field(2000, ge=1)
    group_profiles_max: int = Field(8, ge=0, le=100)
    remember_keywords: tuple[str, ...] = ()
    # Every workspace file keeps this many of its latest versions (history, /undo, /memory why).
    history_versions: int = Field(50, ge=1, le=10000)
    # After an extraction changed memory, the chat is told what was kept: direct chats, every chat, or none.
    receipts: Literal["direct", "all", "off"] = "direct"
    # An incognito chat's messages are deleted at the latest this many hours after incognito began.
    incognito_hours: float = Field(24, gt=0, le=8760)
    # Consolidation proposes MEMORY.md changes for the owner to approve instead of writing them.
    emergence_review: bool = False
    # Extraction in a direct chat: through the chat's cached prompt ("chat": its files billed as a
    # cache read) or its own prompt ("own"). auto: chat on Anthropic's own API, where it saves 13 %
    # of a day's bill and the models follow instructions given inside the chat; own elsewhere: a
    # small model served locally kept nothing when asked from inside the chat's prompt, and
    # servers differ in how they cache and whether they take tool_choice "none".
    extraction_prompt: Literal["auto", "chat", "own"] = "auto"
    # None: search is lexical only. Set, vectors of messages and files are made in the
    # background and fused with the lexical ranking.
    embeddings: EmbeddingsConfig | None = None

    @field_validator("emergence_cron")
    @classmethod
    def _five_fields(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError("must be a five-field cron expression")
        return value


class TasksConfig(_Model):
    """Reminders and scheduled tasks people ask for in a chat."""

    max_per_chat: int = Field(25, ge=1, le=10000)  # live tasks one chat may hold
    min_interval_minutes: float = Field(15, ge=1)  # a repeating task runs at most this often
    # A task the daemon was down for runs once at start-up when at most this late; later,
    # it is skipped and the chat's next reply mentions it.
    catch_up_minutes: float = Field(120, ge=0)
    group_members_may_schedule: bool = False  # in groups: admins only, or every member


DmPolicy = Literal["allowlist", "open"]


class TelegramConfig(_Model):
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


class DiscordConfig(_Model):
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


class ConsoleConfig(_Model):
    enabled: bool | Literal["auto"] = "auto"


class ChannelsConfig(_Model):
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


LogLevel = Literal["debug", "info", "warning", "error"]


class LogConfig(_Model):
    # "" writes no log file; a relative path is taken from the working directory.
    file: str = "data/matebot.log"
    # None: info, and warning on the terminal while the console chat is open.
    level: LogLevel | None = None


class ApiConfig(_Model):
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


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MateConfig(_Model):
    timezone: str = "local"
    locale: Literal["en", "zh-CN"] = "en"
    database: DatabaseConfig = DatabaseConfig()
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


class Config(_Model):
    mate: MateConfig = MateConfig()
    source: str = Field("<defaults>", exclude=True)


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: Any, environ: Mapping[str, str] | None = None) -> Any:
    """Replace ${NAME} and ${NAME:-default} in every string of a YAML tree."""
    env = os.environ if environ is None else environ
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            found = env.get(name)
            if found:
                return found
            if default is not None:
                return default
            if name in env:
                return ""
            raise ConfigError(f"environment variable {name} is not set (use ${{{name}:-}} for an empty default)")

        return _ENV_REF.sub(substitute, value)
    if isinstance(value, dict):
        return {k: expand_env(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env) for v in value]
    return value


def _error_line(error: ValidationError) -> str:
    first = error.errors()[0]
    path = ".".join(str(part) for part in first["loc"])
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif message.startswith("Input should be greater than or equal to"):
        message = "must be >= " + message.rsplit(" ", 1)[-1]
    elif message.startswith("Input should be less than or equal to"):
        message = "must be <= " + message.rsplit(" ", 1)[-1]
    elif message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if re.match(r"^[a-z][a-z0-9.-]*: ", message):  # a cross-field check names its own key
        return f"{path}.{message}" if path else message
    return f"{path}: {message}" if path else message


def resolve_api(data: Any, environ: Mapping[str, str]) -> Any:
    """`mate.llm.api: auto` made concrete from the environment: openai when OPENAI_API_KEY is set
    and ANTHROPIC_API_KEY is not, else anthropic; with neither set it stays `auto` (spoken as
    anthropic), so a missing key can name both variables. With openai, an empty api-key / base-url is
    taken from OPENAI_API_KEY / OPENAI_BASE_URL, as the openai SDK itself would."""
    mate = data.get("mate") if isinstance(data, dict) else None
    llm = mate.get("llm") if isinstance(mate, dict) else None
    if not isinstance(mate, dict) or not isinstance(llm, dict):
        return data
    api = llm.get("api", "anthropic")
    if api == "auto":
        openai_key, anthropic_key = bool(environ.get("OPENAI_API_KEY")), bool(environ.get("ANTHROPIC_API_KEY"))
        if not openai_key and not anthropic_key:
            return data
        api = "openai" if openai_key and not anthropic_key else "anthropic"
    if api != "openai":
        return {**data, "mate": {**mate, "llm": {**llm, "api": api}}} if "api" in llm else data
    resolved = {**llm, "api": "openai"}
    for key, variable in (("api-key", "OPENAI_API_KEY"), ("base-url", "OPENAI_BASE_URL")):
        field = key.replace("-", "_")
        if not str(llm.get(key) or llm.get(field) or "").strip() and environ.get(variable):
            resolved.pop(field, None)
            resolved[key] = environ[variable]
    return {**data, "mate": {**mate, "llm": resolved}}


def parse_config(data: Any, source: str = "<memory>", environ: Mapping[str, str] | None = None) -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping with the key 'mate'")
    try:
        expanded = resolve_api(expand_env(data, environ), os.environ if environ is None else environ)
        return Config.model_validate({**expanded, "source": source})
    except ValidationError as exc:
        raise ConfigError(_error_line(exc)) from None


def load_config(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read PATH (or $MATE_CONFIG, or ./config.yaml when present) into a Config."""
    env = os.environ if environ is None else environ
    chosen = path or env.get("MATE_CONFIG")
    if chosen is None:
        default = Path("config.yaml")
        if not default.exists():
            return parse_config({}, "<defaults>", env)
        chosen = default
    file = Path(chosen)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{file}:{where} invalid YAML") from None
    return parse_config(data, str(file), env)


def masked_dump(config: Config) -> dict[str, Any]:
    """The effective configuration with every secret replaced by '***'."""

    def mask(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: ("***" if k in SECRET_KEYS and v else mask(v)) for k, v in node.items()
            }
        if isinstance(node, list):
            return [mask(v) for v in node]
        return node

    masked: dict[str, Any] = mask(config.model_dump(mode="json", by_alias=True))
    return masked
