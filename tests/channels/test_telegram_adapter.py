"""TelegramChannel with real python-telegram-bot on the fake Bot API, the real anthropic SDK on the fake
Messages API and real SQLite (SPEC S10, S11, S13, S14)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from bot.conversation.commands.names import COMMANDS
from bot.core.config import TelegramConfig, parse_config
from bot.core.errors import MateError
from bot.conversation.router import RoutedReply
from bot.app.runtime import Runtime
from channels.base import InboundMessage, OutboundMessage, Stored
from channels.formatting import utf16_len
from channels.telegram.adapter import STOPPED_INVALID_TOKEN, build_bot, render_chunks
from tests.support.fakes.anthropic import TextReply
from tests.support.fakes.telegram import FakeTelegram
from tests.support.telegram_env import ADMIN, FRIEND, GROUP, STRANGER, TOKEN, Handler, running


async def test_direct_message_is_answered_with_typing(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.llm.reply_text("Hi **Alice**", delay=0.2)
        env.tg.push_text("hello", chat_id=ADMIN, user_id=ADMIN)
        [sent] = await env.tg.wait_for_sent()
    assert sent["chat_id"] == ADMIN
    assert sent["text"] == "Hi <b>Alice</b>"
    assert sent["parse_mode"] == "HTML"
    assert "reply_parameters" not in sent  # no quoting in a private chat
    [request] = env.llm_requests()
    assert "hello" in json.dumps(request["messages"][-1])
    typing = env.tg.calls_of("sendChatAction")
    assert typing and all(c["action"] == "typing" and c["chat_id"] == ADMIN for c in typing)


async def test_commands_are_registered_on_start(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        await env.settle()
        commands = [c["command"] for c in env.tg.commands]
    assert commands == [name for name, _ in COMMANDS]
    assert env.tg.calls_of("deleteWebhook")


async def test_long_reply_is_split_below_the_limit(tmp_path: Path) -> None:
    code = "\n".join(f"    value_{i} = compute({i}) < limit & ok  # 🙂" for i in range(120))
    prose = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum 😀 dolor " * 12 for i in range(25))
    answer = f"{prose}\n\n```python\n{code}\n```\n\nThe end."
    assert len(answer) >= 10_000
    async with running(tmp_path) as env:
        env.llm.reply_text(answer)
        env.tg.push_text("write a lot", chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(3)
        await env.settle()
    texts = [s["text"] for s in env.tg.sent]
    assert len(texts) >= 3
    assert all(utf16_len(t) <= 4096 for t in texts)
    assert all(s["parse_mode"] == "HTML" for s in env.tg.sent)
    assert texts[0].startswith("Paragraph 0") and texts[-1].endswith("The end.")
    joined = "".join(texts)
    assert "value_119 = compute(119) &lt; limit &amp; ok" in joined
    # Every chunk that holds code is a complete <pre> block.
    assert all(t.count("<pre>") == t.count("</pre>") for t in texts)


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:8081", "http://127.0.0.1:8081/bot/"])
def test_base_url_is_normalised_for_ptb(base_url: str) -> None:
    config = TelegramConfig(enabled=True, token=TOKEN, base_url=base_url)
    bot = build_bot(config)
    assert bot.base_url == f"http://127.0.0.1:8081/bot{TOKEN}"
    assert bot.base_file_url == f"http://127.0.0.1:8081/file/bot{TOKEN}"


def test_empty_token_is_a_config_error_without_network() -> None:
    # Read without it (commands that start no channel need none); `matebot run` refuses it.
    channels = parse_config({"mate": {"channels": {"telegram": {"enabled": True}}}}, environ={}).mate.channels
    assert channels.missing_token() == "mate.channels.telegram.token: required when enabled (set TELEGRAM_BOT_TOKEN)"
    with pytest.raises(MateError, match="channels.telegram.token"):
        build_bot(TelegramConfig.model_construct(enabled=True, token=""))


def test_render_chunks_splits_finer_when_escaping_inflates_html() -> None:
    chunks = render_chunks("<&>" * 3000)
    assert len(chunks) > 2
    assert all(html is not None and utf16_len(html) <= 4096 for _, html in chunks)
    assert "".join(md for md, _ in chunks) == "<&>" * 3000


async def test_group_needs_a_mention_a_reply_or_a_command(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.tg.push_text("just chatting", chat_id=GROUP, user_id=FRIEND, chat_type="group")
        await env.settle()
        assert env.llm_requests() == [] and env.tg.sent == []
        assert env.tg.calls_of("sendChatAction") == []  # no typing for chatter we ignore

        env.tg.push_text("@mate_bot hi", chat_id=GROUP, user_id=FRIEND, chat_type="group")
        [first] = await env.tg.wait_for_sent(1)
        env.tg.push_text("and you?", chat_id=GROUP, user_id=FRIEND, chat_type="group", reply_to_bot=True)
        await env.tg.wait_for_sent(2)
        env.tg.push_text("/status@other_bot", chat_id=GROUP, user_id=FRIEND, chat_type="group")
        await env.settle()
    assert len(env.llm_requests()) == 2
    assert "just chatting" not in json.dumps(env.llm_requests())
    assert "[Alice] @mate_bot hi" in json.dumps(env.llm_requests()[0]["messages"])
    assert first["chat_id"] == GROUP
    assert first["reply_parameters"]["message_id"]  # quotes the question in a group
    assert len(env.tg.sent) == 2  # the command for another bot was left alone


async def test_groups_are_closed_by_default_and_only_an_admin_learns_the_id(tmp_path: Path) -> None:
    async with running(tmp_path, group_policy="allowlist") as env:
        env.tg.push_text("@mate_bot spend the owner's credits", chat_id=GROUP, user_id=STRANGER, chat_type="group")
        env.tg.push_text("@mate_bot and me?", chat_id=GROUP, user_id=FRIEND, chat_type="group")
        await env.settle()
        assert env.tg.sent == []
        env.tg.push_text("@mate_bot hello", chat_id=GROUP, user_id=ADMIN, chat_type="group")
        [sent] = await env.tg.wait_for_sent()
    assert env.llm_requests() == []
    assert str(GROUP) in sent["text"] and "allowed-groups" in sent["text"] and "\n" not in sent["text"].strip()


async def test_stranger_in_direct_chat_gets_one_refusal_line(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.tg.push_text("let me in", chat_id=STRANGER, user_id=STRANGER)
        [sent] = await env.tg.wait_for_sent()
    assert str(STRANGER) in sent["text"] and "\n" not in sent["text"].strip()
    assert env.llm_requests() == []


async def test_memory_emerge_is_admin_only(tmp_path: Path) -> None:
    async with running(tmp_path, memory_worker=True) as env:
        env.tg.push_text("/memory emerge", chat_id=FRIEND, user_id=FRIEND)
        [refused] = await env.tg.wait_for_sent(1)
        env.tg.push_text("/memory emerge", chat_id=ADMIN, user_id=ADMIN)
        _, answered = await env.tg.wait_for_sent(2)
    assert refused["chat_id"] == FRIEND
    assert refused["text"] == env.rt.core.prompts.text("not_admin")
    assert answered["chat_id"] == ADMIN
    assert "skipped" in answered["text"]
    assert env.llm_requests() == []


async def test_rate_limit_is_waited_out_and_sent_once(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.tg.fail_next("sendMessage", error_code=429, description="Too Many Requests: retry after 1",
                         retry_after=1)
        env.tg.push_text("hello", chat_id=ADMIN, user_id=ADMIN)
        [sent] = await env.tg.wait_for_sent(timeout=30)
        await env.settle()
    assert sent["text"] == "hello from the model"
    assert len(env.tg.sent) == 1
    assert len(env.tg.calls_of("sendMessage")) == 2


async def test_entity_parse_failure_falls_back_to_plain_text(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.llm.reply_text("Use **bold** here")
        env.tg.fail_next("sendMessage", error_code=400,
                         description="Bad Request: can't parse entities: unsupported start tag")
        env.tg.push_text("hello", chat_id=ADMIN, user_id=ADMIN)
        [sent] = await env.tg.wait_for_sent()
    assert sent["text"] == "Use **bold** here"
    assert "parse_mode" not in sent
    assert env.tg.calls_of("sendMessage")[0]["parse_mode"] == "HTML"


async def test_other_send_errors_drop_the_chunk_without_the_token_in_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="channels")
    async with running(tmp_path) as env:
        env.tg.fail_next("sendMessage", error_code=403, description="Forbidden: bot was blocked by the user")
        env.tg.push_text("hello", chat_id=ADMIN, user_id=ADMIN)
        await env.settle()
        assert env.tg.sent == []
        env.tg.push_text("again", chat_id=ADMIN, user_id=ADMIN)  # polling survived
        await env.tg.wait_for_sent()
    assert "Forbidden" in caplog.text
    assert TOKEN not in caplog.text


async def test_sticker_gets_text_only_answer_without_llm(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.tg.push_sticker(chat_id=ADMIN, user_id=ADMIN)
        [sent] = await env.tg.wait_for_sent()
    assert sent["text"] == env.rt.core.prompts.text("text_only")
    assert env.llm_requests() == []


async def test_forum_topics_are_separate_conversations(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        for thread in (5, 9):
            env.tg.push_text(f"@mate_bot topic {thread}", chat_id=GROUP, user_id=FRIEND, chat_type="supergroup",
                             message_thread_id=thread, is_topic_message=True)
        await env.tg.wait_for_sent(2)
        conversations = env.rt.core.repos.conversations
        five, nine = await conversations.get(f"tg:{GROUP}:5"), await conversations.get(f"tg:{GROUP}:9")
    assert five is not None and nine is not None
    assert sorted(s["message_thread_id"] for s in env.tg.sent) == [5, 9]


async def test_owner_profile_never_reaches_a_group(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        await env.rt.core.workspace.write(1, "PROFILE.md", "# Profile\n\nmy secret is PAPAYA-7731\n", enabled=True)
        env.tg.push_text("@mate_bot what do you know?", chat_id=GROUP, user_id=ADMIN, chat_type="group")
        await env.tg.wait_for_sent(1)
        env.tg.push_text("what do you know?", chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(2)
    group_request, direct_request = env.llm_requests()
    assert "PAPAYA-7731" not in json.dumps(group_request)
    assert "PAPAYA-7731" in json.dumps(direct_request)  # the control: the DM does see it


async def test_slow_conversation_does_not_block_another(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        async def until_the_other_is_answered() -> None:
            await env.tg.wait_for_sent(1)

        env.llm.push(TextReply("slow answer", hold=until_the_other_is_answered))
        env.llm.reply_text("fast answer")
        env.tg.push_text("first", chat_id=ADMIN, user_id=ADMIN)
        async with asyncio.timeout(30):
            while not env.llm_requests():  # the slow request reaches the model first
                await asyncio.sleep(0.02)
        env.tg.push_text("second", chat_id=FRIEND, user_id=FRIEND)
        await env.tg.wait_for_sent(2)
    assert [s["text"] for s in env.tg.sent] == ["fast answer", "slow answer"]


async def test_bots_edits_and_handler_crashes_do_not_stop_polling(tmp_path: Path) -> None:
    calls: list[str] = []

    def flaky(rt: Runtime) -> Handler:
        async def handle(message: InboundMessage, *, stored: Stored | None = None, stream: Any = None) -> RoutedReply | None:
            calls.append(message.text)
            if message.text == "boom":
                raise RuntimeError("handler exploded")
            return await rt.router.handle(message, stored=stored)
        return handle

    async with running(tmp_path, handler=flaky) as env:
        bot_update = env.tg.push_text("from a bot", chat_id=ADMIN, user_id=ADMIN)
        bot_update["message"]["from"]["is_bot"] = True
        edited = env.tg.push_text("edited", chat_id=ADMIN, user_id=ADMIN)
        edited["edited_message"] = edited.pop("message")
        env.tg.push_text("boom", chat_id=ADMIN, user_id=ADMIN)
        await env.settle()
        env.tg.push_text("still there?", chat_id=ADMIN, user_id=ADMIN)
        [sent] = await env.tg.wait_for_sent()
    assert calls == ["boom", "still there?"]
    assert sent["text"] == "hello from the model"


async def test_send_goes_to_the_topic(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        await env.settle()
        await env.channel.send(OutboundMessage("telegram", str(GROUP), "reminder", thread_id="5"))
        [sent] = await env.tg.wait_for_sent()
    assert sent["chat_id"] == GROUP and sent["message_thread_id"] == 5 and sent["text"] == "reminder"


async def test_rejected_token_stops_the_channel_without_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="channels")
    async with running(tmp_path, tg=FakeTelegram(token="654321:OTHER")) as env:
        await asyncio.wait_for(env.task, timeout=30)  # run() returns by itself, without raising
        assert env.channel.state == STOPPED_INVALID_TOKEN
    assert TOKEN not in caplog.text and TOKEN.partition(":")[2] not in caplog.text
