"""Reminders and scheduled tasks people ask for in a chat, delivered to that chat (SPEC S27)."""
