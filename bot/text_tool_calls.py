"""Old home of TextToolCallClient, now bot.llm.text_tool_calls; kept until its importers point there."""

from __future__ import annotations

from bot.llm.text_tool_calls import TextToolCallClient, text_tool_call

__all__ = ["TextToolCallClient", "text_tool_call"]
