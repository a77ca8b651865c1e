"""Voice notes: Telegram voice / audio / round videos and Discord voice messages become
"[voice] <transcript>" through the real openai SDK against a fake /v1/audio/transcriptions
(SPEC S28), with the real PTB and discord.py clients against their fakes."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.core.config import TranscriptionConfig, parse_config
from bot.core.errors import ConfigError
from bot.llm import AnthropicClient
from bot.core.prompts import PromptLibrary
from bot.app.runtime import open_runtime
from bot.media.transcription import OpenAITranscriber, TranscriptionFailed
from bot.media.voice import VoiceNoteReader
from channels.base import IncomingFile
from channels.telegram.adapter import TelegramChannel
from tests.support.config import make_config
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.telegram import FakeTelegram
from tests.support.fakes.transcription import FakeTranscription, spoken
from tests.support.telegram_env import ADMIN, Env, GROUP, TOKEN

SECRET = "sk-voice-secret-0123456789"


def transcription_settings(fake: FakeTranscription, **extra: str) -> dict[str, str]:
    return {"base-url": fake.base_url, "model": "whisper-1", **extra}


@asynccontextmanager
async def telegram(tmp_path: Path, *, stt: FakeTranscription | None,
                   max_minutes: float = 10, require_mention: bool = True) -> AsyncIterator[Env]:
    """The daemon's pipeline on the fake Bot API, with voice notes sent to `stt` (None: not configured)."""
    media: dict[str, Any] = {"max-audio-minutes": max_minutes}
    if stt is not None:
        media["transcription"] = transcription_settings(stt, **{"api-key": SECRET})
    async with FakeAnthropic(default_text="hello from the model") as fake_llm, FakeTelegram() as fake_tg:
        config = make_config(
            tmp_path, media=media,
            llm={"api-key": "k", "base-url": fake_llm.url, "max-retries": 0},
            channels={"telegram": {"enabled": True, "token": TOKEN, "base-url": fake_tg.base_url,
                                   "admins": [str(ADMIN)], "group-policy": "open",
                                   "require-mention": require_mention}},
        )
        async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm,
                                                                          with_memory_worker=False) as rt:
            channel = TelegramChannel(config.mate.channels.telegram, rt.router.handle, rt.core.prompts,
                                      poll_timeout=0.2, backoff_base=0.05, backoff_max=0.2, busy_poll_interval=0.05)
            task = asyncio.create_task(channel.run())
            try:
                yield Env(fake_tg, fake_llm, rt, config, channel, task)
            finally:
                await channel.stop()
                await task


async def stored_texts(env: Env, chat: int = ADMIN) -> list[str]:
    return [m.content for m in await env.rt.core.repos.messages.after(f"tg:{chat}", 0)]


def model_saw(env: Env) -> list[str]:
    """The last user turn of every model request, as text."""
    seen = []
    for request in env.llm_requests():
        content = request["messages"][-1]["content"]
        seen.append(content if isinstance(content, str) else " ".join(b.get("text", "") for b in content))
    return seen


# -- the client, against the fake endpoint ------------------------------------------------------


async def test_the_transcriber_speaks_openais_multipart_protocol() -> None:
    async with FakeTranscription(api_key=SECRET) as stt:
        settings = TranscriptionConfig.model_validate(transcription_settings(stt, **{"api-key": SECRET,
                                                                                       "language": "EN"}))
        async with OpenAITranscriber(settings) as transcriber:
            first = await transcriber.transcribe(spoken("  buy milk  and tea "), "voice.ogg")
            second = await transcriber.transcribe(b"OggS other bytes", "voice.ogg")
    assert first == "buy milk  and tea"
    assert second.startswith("note ") and second != first  # two notes are told apart
    request = stt.requests[0]
    assert (request.filename, request.model, request.language) == ("voice.ogg", "whisper-1", "en")
    assert request.data == spoken("  buy milk  and tea ") and request.authorization == f"Bearer {SECRET}"


@pytest.mark.parametrize("fault", ["fail_status", "html_body", "hang", "wrong_key"])
async def test_a_failing_endpoint_is_a_transcription_failure_and_keeps_the_key_out_of_the_logs(
        fault: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with FakeTranscription(api_key=SECRET) as stt:
        key = SECRET
        if fault == "fail_status":
            stt.fail_status = 500
        elif fault == "html_body":
            stt.html_body = True
        elif fault == "hang":
            stt.hang = True
        else:
            key = "sk-wrong-key-9876543210"
        settings = TranscriptionConfig.model_validate(transcription_settings(stt, **{"api-key": key}))
        async with OpenAITranscriber(settings, timeout=1.0) as transcriber:
            with pytest.raises(TranscriptionFailed) as failed:
                await transcriber.transcribe(spoken("hello"), "voice.ogg")
    expected = {"fail_status": "HTTP 500", "html_body": "an answer without a transcript",
                "hang": "no answer within 1 s", "wrong_key": "HTTP 401"}[fault]
    assert failed.value.reason == expected
    if fault == "fail_status":
        assert len(stt.requests) == 2  # one retry for a 5xx
    assert SECRET not in caplog.text and key not in caplog.text


@pytest.mark.parametrize(("name", "media_type", "upload", "kept"), [
    ("My Recording (1).M4A", "", "MyRecording1.m4a", "m4a"),
    ("audio", "audio/x-something", "audio.ogg", "ogg"),
    ("voice.oga", "audio/ogg", "voice.ogg", "ogg"),
    ("video_note.mp4", "video/mp4", "video_note.mp4", "mp4"),
    ("", "audio/mpeg", "voice.mp3", "mp3"),
])
async def test_every_upload_has_a_name_the_servers_take(name: str, media_type: str, upload: str, kept: str) -> None:
    async with FakeTranscription() as stt:  # it answers 400 for a name without a supported extension, as OpenAI does
        settings = TranscriptionConfig.model_validate(transcription_settings(stt))
        async with OpenAITranscriber(settings) as transcriber:
            reader = VoiceNoteReader(transcriber, max_minutes=10)
            note = await reader.hear(IncomingFile(name, media_type, 10, _never, is_voice=True), spoken("hi there"))
    assert (stt.requests[0].filename, note.extension, note.text) == (upload, kept, "[voice] hi there")


async def _never() -> bytes:
    raise AssertionError("hear() is given the bytes")


def test_transcription_config_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"mate": {"media": {"transcription": {"base-url": "localhost:8080"}}}}, environ={})
    assert "mate.media.transcription.base-url" in str(error.value)
    with pytest.raises(ConfigError) as error:
        parse_config({"mate": {"media": {"max-audio-minutes": 0}}}, environ={})
    assert "mate.media.max-audio-minutes" in str(error.value)
    defaults = make_config(tmp_path).mate.media
    assert (defaults.max_audio_minutes, defaults.transcription) == (10, None)


def test_the_voice_lines_are_localised() -> None:
    for key in ("voice_off", "voice_failed", "voice_empty"):
        english, chinese = PromptLibrary("en").text(key), PromptLibrary("zh-CN").text(key)
        assert english != chinese and english and chinese
    assert "mate.media.transcription" in PromptLibrary("zh-CN").text("voice_off")
    assert "5" in PromptLibrary("zh-CN").text("voice_too_long", limit="5")


# -- Telegram ----------------------------------------------------------------------------------


async def test_a_telegram_voice_note_is_answered_as_its_transcript_and_kept(tmp_path: Path) -> None:
    async with FakeTranscription(api_key=SECRET) as stt, telegram(tmp_path, stt=stt) as env:
        env.llm.reply_text("Milk and tea, noted.")
        env.llm.reply_text("Bread too.")
        env.tg.push_voice(spoken("remind me to buy milk and tea"), duration=3, chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(1)
        env.tg.push_voice(spoken("and bread"), duration=2, chat_id=ADMIN, user_id=ADMIN)
        sent = await env.tg.wait_for_sent(2)
        stored = await stored_texts(env)

    assert [s["text"] for s in sent] == ["Milk and tea, noted.", "Bread too."]
    assert [s for s in model_saw(env) if "[voice]" in s][0].endswith("[voice] remind me to buy milk and tea")
    assert stored == ["[voice] remind me to buy milk and tea", "Milk and tea, noted.", "[voice] and bread",
                      "Bread too."]
    assert [r.filename for r in stt.requests] == ["voice.ogg", "voice.ogg"]
    kept = tmp_path / "media" / f"{hashlib.sha256(spoken('and bread')).hexdigest()}.ogg"
    assert kept.read_bytes() == spoken("and bread")


async def test_telegram_audio_files_and_round_videos_are_transcribed_too(tmp_path: Path) -> None:
    async with FakeTranscription() as stt, telegram(tmp_path, stt=stt) as env:
        env.tg.push_audio(spoken("a song about rain"), "rain.mp3", "audio/mpeg", duration=200,
                          caption="what is it about?", chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(1)
        env.tg.push_video_note(spoken("look at my cat"), duration=9, chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(2)
        stored = await stored_texts(env)

    assert [r.filename for r in stt.requests] == ["rain.mp3", "video_note.mp4"]
    assert stored[0] == "[voice] a song about rain\n\nwhat is it about?"
    assert stored[2] == "[voice] look at my cat"


async def test_a_long_telegram_voice_note_is_refused_before_it_is_downloaded(tmp_path: Path) -> None:
    async with FakeTranscription() as stt, telegram(tmp_path, stt=stt, max_minutes=2) as env:
        env.tg.push_voice(spoken("a very long story"), duration=121, chat_id=ADMIN, user_id=ADMIN)
        [refused] = await env.tg.wait_for_sent(1)
        # An audio file sent as a document has no duration: its size bounds it (320 kbit/s).
        env.tg.push_document(b"ID3 talk", "talk.mp3", "audio/mpeg", size=5_000_000, chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(2)
        # A duration the sender's app reports is not trusted past what the file's size can hold.
        env.tg.push_voice(b"OggS" + bytes(5_000_000), duration=1, chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(3)
        stored = await stored_texts(env)

    assert all("longer than 2 minutes" in sent["text"] for sent in env.tg.sent[:3])
    assert env.tg.downloads == [] and stt.requests == [] and env.llm_requests() == [] and stored == []


async def test_without_transcription_a_voice_note_is_told_how_to_turn_it_on(tmp_path: Path) -> None:
    async with telegram(tmp_path, stt=None) as env:
        env.tg.push_voice(spoken("hello"), duration=2, chat_id=ADMIN, user_id=ADMIN)
        [answer] = await env.tg.wait_for_sent(1)
        # A group's voice note not meant for the bot gets nothing; one replying to it gets the line.
        env.tg.push_voice(spoken("chatting"), duration=2, chat_id=GROUP, user_id=ADMIN, chat_type="group")
        env.tg.push_voice(spoken("hey bot"), duration=2, chat_id=GROUP, user_id=ADMIN, chat_type="group",
                          reply_to_bot=True)
        await env.tg.wait_for_sent(2)

    assert "mate.media.transcription" in answer["text"] and "Voice notes" in answer["text"]
    assert env.tg.sent[1]["chat_id"] == GROUP and len(env.tg.sent) == 2
    assert env.tg.downloads == [] and env.llm_requests() == []


async def test_a_group_answered_without_a_mention_is_not_told_about_each_voice_note(tmp_path: Path) -> None:
    async with telegram(tmp_path, stt=None, require_mention=False) as env:
        env.tg.push_voice(spoken("chatting"), duration=2, chat_id=GROUP, user_id=ADMIN, chat_type="group")
        env.tg.push_text("what time is it?", chat_id=GROUP, user_id=ADMIN, chat_type="group")
        await env.tg.wait_for_sent(1)  # the text is answered; the voice note before it was not
        env.tg.push_voice(spoken("hey bot"), duration=2, chat_id=GROUP, user_id=ADMIN, chat_type="group",
                          reply_to_bot=True)
        await env.tg.wait_for_sent(2)

    assert env.tg.sent[0]["text"] == "hello from the model" and "mate.media.transcription" in env.tg.sent[1]["text"]
    assert len(env.tg.sent) == 2 and env.tg.downloads == []


async def test_a_failed_transcription_gets_its_own_apology_and_nothing_reaches_the_model(tmp_path: Path) -> None:
    async with FakeTranscription(fail_status=503) as stt, telegram(tmp_path, stt=stt) as env:
        env.tg.push_voice(spoken("are you there"), duration=2, chat_id=ADMIN, user_id=ADMIN)
        [apology] = await env.tg.wait_for_sent(1)
        stt.fail_status = None
        env.tg.push_voice(spoken("now?"), duration=2, chat_id=ADMIN, user_id=ADMIN)  # the bot still works
        await env.tg.wait_for_sent(2)
        stored = await stored_texts(env)

    assert "could not make out that voice note" in apology["text"]
    assert model_saw(env)[-1].endswith("[voice] now?") and len(env.llm_requests()) == 1
    assert stored == ["[voice] now?", "hello from the model"]


async def test_a_silent_voice_note_is_answered_without_the_model(tmp_path: Path) -> None:
    async with FakeTranscription() as stt, telegram(tmp_path, stt=stt) as env:
        env.tg.push_voice(spoken("   "), duration=2, chat_id=ADMIN, user_id=ADMIN)
        [answer] = await env.tg.wait_for_sent(1)
    assert "could not hear any words" in answer["text"] and env.llm_requests() == []


# -- Discord -----------------------------------------------------------------------------------


async def test_discord_voice_messages_and_audio_attachments_are_transcribed(tmp_path: Path) -> None:
    from tests.support.discord_env import open_env

    async with FakeTranscription() as stt:
        media = {"transcription": transcription_settings(stt), "max-audio-minutes": 2}
        async for env in open_env(tmp_path, stream=False, media=media):
            env.fa.reply_text("Got it.")
            await env.dc.send_voice_message(spoken("call the plumber tomorrow"), duration=4.5)
            await env.dc.wait_sent(1)
            env.fa.reply_text("Nice tune.")
            await env.dc.send_dm("listen", attachments=(("tune.mp3", "audio/mpeg", spoken("la la la")),))
            await env.dc.wait_sent(2)
            await env.dc.send_voice_message(spoken("a long one"), duration=121)
            [*_, refused] = await env.dc.wait_sent(3)
            stored = [m.content for m in await env.rt.core.repos.messages.after("dc:300", 0)]

    assert [r.filename for r in stt.requests] == ["voice-message.ogg", "tune.mp3"]
    assert stored == ["[voice] call the plumber tomorrow", "Got it.", "[voice] la la la\n\nlisten", "Nice tune."]
    assert "longer than 2 minutes" in refused["content"] and len(env.fa.messages_requests()) == 2
    assert env.dc.downloads == ["voice-message.ogg", "tune.mp3"]  # the long one was never fetched
