"""Reminders people ask for in a chat: the rules, the model's tools, delivery to the chat."""
