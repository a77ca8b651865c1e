"""Memory extraction's transcript, rendered by bot.context.transcript (the one renderer compaction also uses)."""

from __future__ import annotations

from bot.context.transcript import TRANSCRIPT_ROLES, build_transcript

__all__ = ["TRANSCRIPT_ROLES", "build_transcript"]
