"""Updates python-telegram-bot cannot read: each one is skipped with one log line naming its id,
the good updates of the same getUpdates answer are answered, and polling goes on (SPEC S30).

The real TelegramChannel polls the fake Bot API, which hands out the raw update dicts as queued.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.eventually import eventually
from tests.support.telegram_env import ADMIN, FRIEND, TOKEN, running

SECRET = "PAYLOAD-SECRET-do-not-log"  # text inside the bad update that must never reach the log


def _message(text: str, chat_id: int) -> dict[str, Any]:
    return {"message_id": 900 + chat_id, "date": int(time.time()), "text": text,
            "chat": {"id": chat_id, "type": "private", "first_name": "Alice"},
            "from": {"id": chat_id, "is_bot": False, "first_name": "Alice"}}


def _chat_without_type() -> dict[str, Any]:
    message = _message(SECRET, ADMIN)
    del message["chat"]["type"]
    return {"message": message}


def _date_as_text() -> dict[str, Any]:
    return {"message": {**_message(SECRET, ADMIN), "date": "yesterday"}}


def _entity_without_offset() -> dict[str, Any]:
    return {"message": {**_message(SECRET, ADMIN), "entities": [{"type": "bold"}]}}


def _message_not_an_object() -> dict[str, Any]:
    return {"message": SECRET}


def _date_out_of_range() -> dict[str, Any]:
    return {"message": {**_message(SECRET, ADMIN), "date": 10**20}}


def _telegram_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(("channels.telegram", "telegram"))
            and r.levelno >= logging.WARNING]


def _telegram_text(caplog: pytest.LogCaptureFixture) -> str:
    """Everything the channel and python-telegram-bot logged (the daemon keeps HTTP logs at WARNING)."""
    return "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records
                     if r.name.startswith(("channels", "telegram")))


@pytest.mark.parametrize("bad", [_chat_without_type, _date_as_text, _entity_without_offset,
                                 _message_not_an_object, _date_out_of_range])
async def test_an_unreadable_update_between_two_good_ones_is_skipped_and_named_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: Any,
) -> None:
    caplog.set_level(logging.INFO)
    async with running(tmp_path) as env:
        await env.tg.wait_for_call("getUpdates")
        # Queued together, so the fake hands all three out in one getUpdates answer.
        first = env.tg.push_text("first", chat_id=ADMIN, user_id=ADMIN)["update_id"]
        env.tg.push_update(broken := bad())
        bad_id = broken["update_id"]
        second = env.tg.push_text("second", chat_id=FRIEND, user_id=FRIEND)["update_id"]
        sent = await env.tg.wait_for_sent(2)
        assert sorted(s["chat_id"] for s in sent) == sorted([ADMIN, FRIEND])
        assert [first, bad_id, second] in env.tg.handed_out  # one answer held all three
        await eventually(lambda: env.tg.confirmed_below > second)  # Telegram was told to forget the bad one
        env.tg.push_text("later", chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(3)  # polling goes on
    assert len(env.llm_requests()) == 3  # the bad update never reached the model
    [line] = _telegram_lines(caplog)  # one line, naming the id and what PTB tripped over
    assert line.getMessage().startswith(f"telegram update {bad_id} skipped: python-telegram-bot cannot read it (")
    assert line.exc_info is None and "\n" not in line.getMessage()
    ours = _telegram_text(caplog)
    assert SECRET not in ours and TOKEN not in ours and "unreachable" not in ours


async def test_an_entry_without_an_update_id_is_skipped_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with running(tmp_path) as env:
        await env.tg.wait_for_call("getUpdates")
        env.tg.push_raw({"message": _message(SECRET, ADMIN)})
        env.tg.push_raw(SECRET)
        env.tg.push_text("hello", chat_id=FRIEND, user_id=FRIEND)
        [sent] = await env.tg.wait_for_sent(1)
        assert sent["chat_id"] == FRIEND
        env.tg.push_text("later", chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(2)
    lines = _telegram_lines(caplog)
    assert [r.getMessage() for r in lines] == [
        "telegram skipped 2 getUpdates entries without an update id"]
    ours = _telegram_text(caplog)
    assert SECRET not in ours and TOKEN not in ours and "unreachable" not in ours


async def test_a_getupdates_answer_that_is_not_a_list_is_retried_and_not_called_unreachable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with running(tmp_path) as env:
        await env.tg.wait_for_call("getUpdates")
        env.tg.answer_next("getUpdates", {"update_id": 1, "text": SECRET})
        await eventually(lambda: _telegram_lines(caplog))  # a later poll got the odd answer
        env.tg.push_text("still there?", chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(1)  # retried on a fresh client, then answered
    [line] = _telegram_lines(caplog)
    assert line.getMessage().startswith("telegram Bot API answered unexpectedly (UnexpectedAnswer: getUpdates "
                                        "answered a dict, not a list); retry 1 in ")
    ours = _telegram_text(caplog)
    assert SECRET not in ours and "unreachable" not in ours
