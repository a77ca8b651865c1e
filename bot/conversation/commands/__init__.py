"""Slash commands, the same on every channel."""
