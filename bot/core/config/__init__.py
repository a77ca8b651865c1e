"""Load config.yaml into one frozen, validated Config tree (SPEC S2): one module per section."""

from __future__ import annotations

from bot.core.config.base import SECRET_KEYS, http_address, is_loopback
from bot.core.config.llm import DEFAULT_MODEL, LlmApi, LlmConfig
from bot.core.config.agents import AgentConfig, AgentEntry, ConversationConfig, PERSON_CHANNELS, PersonEntry, RouteRule, WindowConfig
from bot.core.config.media import MediaConfig, TranscriptionConfig
from bot.core.config.memory import EmbeddingsConfig, MemoryConfig
from bot.core.config.tasks import TasksConfig
from bot.core.config.channels import ChannelsConfig, ConsoleConfig, DiscordConfig, DmPolicy, TelegramConfig
from bot.core.config.mate import ApiConfig, Config, DatabaseConfig, LogConfig, LogLevel, MateConfig
from bot.core.config.loading import expand_env, load_config, masked_dump, parse_config, resolve_api

__all__ = [
    "AgentConfig",
    "AgentEntry",
    "ApiConfig",
    "ChannelsConfig",
    "Config",
    "ConsoleConfig",
    "ConversationConfig",
    "DEFAULT_MODEL",
    "DatabaseConfig",
    "DiscordConfig",
    "DmPolicy",
    "EmbeddingsConfig",
    "LlmApi",
    "LlmConfig",
    "LogConfig",
    "LogLevel",
    "MateConfig",
    "MediaConfig",
    "MemoryConfig",
    "PERSON_CHANNELS",
    "PersonEntry",
    "RouteRule",
    "SECRET_KEYS",
    "TasksConfig",
    "TelegramConfig",
    "TranscriptionConfig",
    "WindowConfig",
    "expand_env",
    "http_address",
    "is_loopback",
    "load_config",
    "masked_dump",
    "parse_config",
    "resolve_api",
]
