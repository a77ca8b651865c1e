"""The Bot API methods the fake Telegram answers by Telegram's rules: getUpdates, sending, drafts, edits."""

from __future__ import annotations

import time
from typing import Any, Callable

from tests.support.fakes.telegram_html import BadRequestReason
from tests.support.fakes.telegram_updates import TelegramUpdates
from tests.support.fakes.telegram_wire import MAX_TEXT_LENGTH, NOT_MODIFIED, inline_markup, message_content, update_id_of


class TelegramMethods(TelegramUpdates):
    """Handlers of the Bot API methods: each takes the decoded parameters and returns the result,
    or raises BadRequestReason for Telegram's 400 answer. Unknown methods go to `_fallback`."""

    async def _get_updates(self, params: dict[str, Any],
                           superseded: Callable[[], bool] = lambda: False) -> list[dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        if offset > 0:
            # Telegram forgets everything below the offset: that is the confirmation.
            self._updates = [u for u in self._updates if update_id_of(u) is None or update_id_of(u) >= offset]
        elif offset < 0:
            self._updates = self._updates[offset:]
        # Capped at 1 s so a test never blocks on a long poll.
        wait = min(float(params.get("timeout") or 0), 1.0)
        await self._wait_until(lambda: bool(self._updates) or self._closing or not self._serving or superseded(),
                               wait)
        if superseded():
            return []
        limit = int(params.get("limit") or 100)
        result = self._updates[:limit]
        once = {id(u) for u in result if update_id_of(u) is None}
        self._updates = [u for u in self._updates if id(u) not in once]
        return result

    def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        reply = params.get("reply_parameters")
        if isinstance(reply, dict) and "reply_to_message_id" not in params:
            # PTB 22 always sends reply_parameters; expose the flat id tests usually want.
            params["reply_to_message_id"] = reply.get("message_id")
        text, entities = message_content(params)
        if not text.strip():
            raise BadRequestReason("message text is empty")
        if len(text) > MAX_TEXT_LENGTH:
            raise BadRequestReason("message is too long")
        fields: dict[str, Any] = {"text": text}
        if entities:
            fields["entities"] = entities
        if markup := inline_markup(params):
            fields["reply_markup"] = markup
        message = self._bot_message(params["chat_id"], fields, params.get("message_thread_id"))
        reply_id = params.get("reply_to_message_id")
        if reply_id is not None and (params["chat_id"], reply_id) in self._messages:
            message["reply_to_message"] = self._messages[(params["chat_id"], reply_id)]
        self.sent.append(params)
        self._show("sendMessage", params["chat_id"], text)
        return message

    def _send_message_draft(self, params: dict[str, Any]) -> bool:
        chat_id = params.get("chat_id")
        if self._chat(chat_id)["type"] != "private":
            raise BadRequestReason("method is available only for private chats")
        draft_id = params.get("draft_id")
        if not isinstance(draft_id, int) or isinstance(draft_id, bool) or draft_id == 0:
            raise BadRequestReason("draft_id must be a non-zero integer")
        text, _ = message_content(params)
        if len(text) > MAX_TEXT_LENGTH:
            raise BadRequestReason("message is too long")
        self.drafts.append(params)
        if text:  # Bot API 10.0: an empty draft is a "Thinking..." placeholder, not text
            self._show("sendMessageDraft", chat_id, text)
        else:
            self._notify()
        return True

    def _set_my_commands(self, params: dict[str, Any]) -> bool:
        self.commands = list(params.get("commands") or [])
        return True

    def _delete_my_commands(self, params: dict[str, Any]) -> bool:
        self.commands = []
        return True

    def _edit_message_text(self, params: dict[str, Any]) -> dict[str, Any] | bool:
        text, entities = message_content(params)
        if not text.strip():
            raise BadRequestReason("message text is empty")
        if len(text) > MAX_TEXT_LENGTH:
            raise BadRequestReason("MESSAGE_TOO_LONG")
        markup = inline_markup(params)
        if "inline_message_id" in params:
            self.edits.append(params)
            self._show("editMessageText", None, text)
            return True  # Telegram answers inline edits with a bare True.
        message_id = params.get("message_id")
        message = None
        if isinstance(message_id, int):
            message = self._messages.get((params.get("chat_id"), message_id))
        if message is None:
            raise BadRequestReason("message to edit not found")
        if message["from"]["id"] != self.bot_user["id"]:
            raise BadRequestReason("message can't be edited")
        if "text" not in message:
            raise BadRequestReason("there is no text in the message to edit")
        current = (message["text"], message.get("entities", []), message.get("reply_markup"))
        if (text, entities, markup) == current:
            raise BadRequestReason(NOT_MODIFIED)
        message.update(text=text, edit_date=int(time.time()))
        for field, value in (("entities", entities), ("reply_markup", markup)):
            if value:
                message[field] = value
            else:
                message.pop(field, None)
        self.edits.append(params)
        self._show("editMessageText", params.get("chat_id"), text)
        return message

    def _delete_message(self, params: dict[str, Any]) -> bool:
        key = (params.get("chat_id"), params.get("message_id"))
        if key not in self._messages:
            raise BadRequestReason("message to delete not found")
        del self._messages[key]
        self.deleted.append(params)
        self._show("deleteMessage", params.get("chat_id"), "")
        return True

    def _set_webhook(self, params: dict[str, Any]) -> bool:
        url = str(params.get("url") or "")
        if not url.startswith("https://"):
            raise BadRequestReason("bad webhook: An HTTPS URL must be provided for webhook")
        self.webhook = dict(params)
        return True

    def _delete_webhook(self, params: dict[str, Any]) -> bool:
        self.webhook = None
        return True

    def _fallback(self, method: str) -> Callable[[dict[str, Any]], Any]:
        if not method.startswith("send"):
            return lambda p: True

        # PTB parses send* results as Message objects; a bare True would crash it.
        def send(p: dict[str, Any]) -> Any:
            fields = {"caption": p["caption"]} if "caption" in p else {}
            message = self._bot_message(p.get("chat_id", 0), fields, p.get("message_thread_id"))
            return [message] if method == "sendMediaGroup" else message

        return send

