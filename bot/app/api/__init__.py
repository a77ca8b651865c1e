"""The admin HTTP API and the web chat page on aiohttp."""
