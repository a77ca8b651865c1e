"""The Telegram channel: polling, the reply preview, the bot client, and the adapter that joins them."""
