"""The Discord channel: a discord.py client turned into InboundMessages and replies."""
