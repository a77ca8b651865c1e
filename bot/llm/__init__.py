"""The language model behind one port: the LLMClient protocol, its clients and the wrappers around them.

port.py holds what callers use (LLMRequest, LLMResponse, LLMClient); each protocol is one
client module beside it (anthropic.py, openai.py), offline.py answers without a model, and usage.py
and text_tool_calls.py wrap any client. Callers import the names below from `bot.llm`.
"""

from __future__ import annotations

from bot.llm.port import LLMClient, LLMRequest, LLMResponse, TextListener, ToolCall
from bot.llm.failures import is_prompt_too_long
from bot.llm.anthropic import AnthropicClient
from bot.llm.offline import OfflineClient
from bot.llm.openai import OpenAIClient
from bot.llm.text_tool_calls import TextToolCallClient, text_tool_call
from bot.llm.usage import UsageRecordingClient

__all__ = [
    "AnthropicClient",
    "LLMClient",
    "LLMRequest",
    "LLMResponse",
    "OfflineClient",
    "OpenAIClient",
    "TextListener",
    "TextToolCallClient",
    "ToolCall",
    "UsageRecordingClient",
    "is_prompt_too_long",
    "text_tool_call",
]
