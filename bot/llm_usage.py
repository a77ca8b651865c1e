"""Old home of UsageRecordingClient, now bot.llm.usage; kept until its importers point there."""

from __future__ import annotations

from bot.llm.usage import UsageRecordingClient

__all__ = ["UsageRecordingClient"]
