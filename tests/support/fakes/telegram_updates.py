"""Updates a test pushes to the fake Telegram, and the messages and chats in them as Telegram shapes them."""

from __future__ import annotations

import time
from typing import Any

from tests.support.fakes.telegram_html import utf16_len
from tests.support.fakes.telegram_state import TelegramState


class TelegramUpdates(TelegramState):
    """Queues updates for getUpdates: as given (`push_update`, `push_raw`) or built (`push_text`,
    `push_sticker`); builds the chats and messages of users and of the bot, and keeps the messages."""

    # -- test-facing API ---------------------------------------------------------------------

    def push_update(self, update: dict[str, Any]) -> None:
        """Queue an update as given (malformed ones too), numbered if it has no update_id."""
        if "update_id" not in update:
            update["update_id"] = next(self._update_ids)
        self._updates.append(update)
        self._notify()

    def push_raw(self, entry: Any) -> None:
        """Queue any JSON value as a getUpdates entry, as is. One without an integer update_id
        cannot be confirmed by an offset: it is handed out once."""
        self._updates.append(entry)
        self._notify()

    def push_text(
        self,
        text: str,
        *,
        chat_id: int = 42,
        user_id: int = 42,
        chat_type: str = "private",
        first_name: str = "Alice",
        username: str | None = "alice",
        message_thread_id: int | None = None,
        is_topic_message: bool = False,
        reply_to_bot: bool = False,
        entities: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        message = self._incoming(chat_id, user_id, chat_type, first_name, username)
        message["text"] = text
        message["entities"] = self._auto_entities(text) if entities is None else entities
        if message_thread_id is not None:
            message["message_thread_id"] = message_thread_id
            if chat_type == "supergroup":
                message["chat"]["is_forum"] = True
        if is_topic_message:
            message["is_topic_message"] = True
        if reply_to_bot:
            message["reply_to_message"] = self._bot_message(
                chat_id, {"text": "earlier reply"}, message_thread_id
            )
        return self._push_message(message)

    def push_sticker(self, *, chat_id: int = 42, user_id: int = 42) -> dict[str, Any]:
        message = self._incoming(chat_id, user_id, "private" if chat_id > 0 else "group")
        message["sticker"] = {
            "file_id": f"sticker-{message['message_id']}",
            "file_unique_id": f"uniq-{message['message_id']}",
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
            "emoji": "👍",
        }
        return self._push_message(message)

    def _caption(self, message: dict[str, Any], caption: str | None) -> None:
        if caption is not None:
            message["caption"] = caption
            if entities := self._auto_entities(caption):
                message["caption_entities"] = entities

    # -- builders ----------------------------------------------------------------------------

    def _chat(self, chat_id: Any, chat_type: str | None = None) -> dict[str, Any]:
        if chat_type is None:
            default = "private" if isinstance(chat_id, int) and chat_id > 0 else "supergroup"
            chat_type = self._chat_types.get(chat_id, default)
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = "Alice"
        else:
            chat["title"] = "Test Group"
        return chat

    def _incoming(
        self,
        chat_id: int,
        user_id: int,
        chat_type: str,
        first_name: str = "Alice",
        username: str | None = "alice",
    ) -> dict[str, Any]:
        self._chat_types[chat_id] = chat_type
        chat = self._chat(chat_id, chat_type)
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username is not None:
            user["username"] = username
        if chat_type == "private":
            chat.update({k: v for k, v in user.items() if k in ("first_name", "username")})
        return {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": user,
        }

    def _push_message(self, message: dict[str, Any]) -> dict[str, Any]:
        self._messages[(message["chat"]["id"], message["message_id"])] = message
        update = {"update_id": next(self._update_ids), "message": message}
        self.push_update(update)
        return update

    def _bot_message(
        self, chat_id: Any, fields: dict[str, Any], thread_id: int | None
    ) -> dict[str, Any]:
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": self._chat(chat_id),
            "from": self.bot_user,
            **fields,
        }
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        self._messages[(chat_id, message["message_id"])] = message
        return message

    def _auto_entities(self, text: str) -> list[dict[str, Any]]:
        entities: list[dict[str, Any]] = []
        command_end = 0
        if text.startswith("/"):
            command = text.split(maxsplit=1)[0]
            command_end = len(command)
            entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(command)})
        mention = f"@{self.bot_user['username']}"
        start = text.find(mention, command_end)
        if start >= 0:
            entities.append(
                {
                    "type": "mention",
                    "offset": utf16_len(text[:start]),
                    "length": utf16_len(mention),
                }
            )
        return entities
