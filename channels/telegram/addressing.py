"""Whether a Telegram message speaks to this bot: a mention, a reply to it, or a command for another bot."""

from __future__ import annotations

from telegram import Message, MessageEntity


def mentions_bot(message: Message, bot_id: int, username: str) -> bool:
    """@username, a text mention of the bot, or a reply to the bot (a command is is_addressed's to see)."""
    username = username.lower()
    entities = {**message.parse_entities(), **message.parse_caption_entities()}
    for entity, text in entities.items():
        if entity.type == MessageEntity.MENTION and username and text.lower() == f"@{username}":
            return True
        if entity.type == MessageEntity.TEXT_MENTION and entity.user is not None and entity.user.id == bot_id:
            return True
    replied = message.reply_to_message
    return (replied is not None and replied.from_user is not None and replied.from_user.id == bot_id
            and replied.forum_topic_created is None)


def command_for_other_bot(message: Message, username: str) -> bool:
    """"/new@other_bot" in a group (or a caption starting so) is meant for another bot."""
    text = message.text or message.caption or ""
    if not text.startswith("/"):
        return False
    command = text.split(maxsplit=1)[0]
    target = command.partition("@")[2].lower()
    return bool(target) and target != username.lower()
