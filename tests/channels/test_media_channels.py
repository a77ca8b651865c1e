"""Photos and documents from Telegram and Discord reach the model, through the real SDKs (SPEC S21)."""

from __future__ import annotations

import asyncio
import base64
import io
from pathlib import Path
from typing import Any

from PIL import Image

from tests.support.media_files import PDF, picture
from tests.support.telegram_env import ADMIN, FRIEND, GROUP, running


def sent_blocks(fake_llm: Any, index: int = -1) -> list[dict[str, Any]]:
    content = fake_llm.messages_requests()[index]["messages"][-1]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def image_size(block: dict[str, Any]) -> tuple[int, int]:
    with Image.open(io.BytesIO(base64.b64decode(block["source"]["data"]))) as image:
        return image.size


async def test_a_telegram_photo_with_a_caption_reaches_the_model(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.llm.reply_text("A red square.")
        env.tg.push_photo(picture(2560, 1920, "JPEG"), width=2560, height=1920, caption="what is it?",
                          chat_id=ADMIN, user_id=ADMIN)
        [sent] = await env.tg.wait_for_sent(timeout=30)
        stored = [m.content for m in await env.rt.core.repos.messages.after(f"tg:{ADMIN}", 0)]

    assert sent["text"] == "A red square."
    blocks = sent_blocks(env.llm)
    [image] = [b for b in blocks if b["type"] == "image"]
    assert image_size(image) == (1568, 1176)  # the largest size, scaled
    assert blocks[-1]["text"].endswith("[image] what is it?")
    assert len(env.tg.downloads) == 1 and stored[0] == "[image] what is it?"


async def test_a_telegram_album_is_answered_once_with_all_its_pictures(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.llm.reply_text("The left one is redder.")
        env.tg.push_photo(picture(800, 600, "JPEG", (250, 0, 0)), width=800, height=600, caption="which is redder?",
                          chat_id=ADMIN, user_id=ADMIN, media_group_id="album-1")
        second = env.tg.push_photo(picture(800, 600, "JPEG", (120, 0, 0)), width=800, height=600,
                                   chat_id=ADMIN, user_id=ADMIN, media_group_id="album-1")
        [sent] = await env.tg.wait_for_sent(timeout=30)
        await asyncio.sleep(1.5)  # no second reply comes
        confirmed = max(o for o in env.tg.offsets if o is not None)

    assert confirmed > second["update_id"]  # both updates confirmed, none delivered again
    assert sent["text"] == "The left one is redder." and len(env.tg.sent) == 1
    assert len(env.llm.messages_requests()) == 1
    blocks = sent_blocks(env.llm)
    assert [b["type"] for b in blocks] == ["image", "image", "text"]
    assert blocks[-1]["text"].endswith("[image] [image] which is redder?")


async def test_a_telegram_document_arrives_as_text_or_as_a_pdf(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.llm.reply_text("Milk and tea.")
        env.llm.reply_text("Two pages.")
        env.tg.push_document("- milk\n- tea\n".encode(), "list.txt", "text/plain", chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(1, timeout=30)
        env.tg.push_document(PDF, "report.pdf", "application/pdf", caption="summarise", chat_id=ADMIN,
                             user_id=ADMIN)
        await env.tg.wait_for_sent(2, timeout=30)

    first = sent_blocks(env.llm, 0)
    assert "[file: list.txt]\n- milk\n- tea" in first[-1]["text"]
    second = sent_blocks(env.llm, 1)
    assert [b["type"] for b in second[:-1]] == ["document"]
    assert second[-1]["text"].endswith("[document: report.pdf] summarise")


async def test_what_telegram_cannot_give_us_gets_a_polite_answer(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.tg.push_document(b"", "movie.mp4", "video/mp4", size=60 * 1024 * 1024, chat_id=ADMIN, user_id=ADMIN)
        [too_big] = await env.tg.wait_for_sent(timeout=30)
        env.tg.push_document(b"PK\x03\x04", "a.zip", "application/zip", chat_id=ADMIN, user_id=ADMIN)
        await env.tg.wait_for_sent(2, timeout=30)
        env.tg.push_photo(picture(100, 100), width=100, height=100, chat_id=GROUP, user_id=FRIEND,
                          chat_type="group")  # not addressed to the bot
        env.tg.push_text("@mate_bot hi", chat_id=GROUP, user_id=FRIEND, chat_type="group")
        await env.tg.wait_for_sent(3, timeout=30)

    assert "too large" in too_big["text"] and "10 MB" in too_big["text"]
    assert "a.zip" in env.tg.sent[1]["text"]
    assert env.tg.downloads == []  # nothing is fetched for a message the bot does not answer
    assert not any(b["type"] == "image" for r in env.llm.messages_requests() for m in r["messages"]
                   if isinstance(m["content"], list) for b in m["content"])


# -- Discord ------------------------------------------------------------------------------


async def test_discord_image_attachments_reach_the_model(tmp_path: Path) -> None:
    from tests.support.discord_env import open_env

    async for env in open_env(tmp_path, stream=False):
        env.fa.reply_text("Two pictures.")
        await env.dc.send_guild_message("compare these", mention_bot=True, attachments=(
            ("a.png", "image/png", picture(3000, 1500)), ("b.webp", "image/webp", picture(300, 200, "WEBP"))))
        [sent] = await env.dc.wait_sent(1)
        env.fa.reply_text("Sure.")
        await env.dc.send_dm("hi", author_id="42", attachments=(("song.mp3", "audio/mpeg", b"ID3 fake"),))
        [_, refused] = await env.dc.wait_sent(2)

    assert sent["content"] == "Two pictures."
    blocks = sent_blocks(env.fa, 0)
    images = [b for b in blocks if b["type"] == "image"]
    assert [image_size(b) for b in images] == [(1568, 784), (300, 200)]
    assert [b["source"]["media_type"] for b in images] == ["image/png", "image/webp"]
    assert blocks[-1]["text"].endswith("[alice] [image] [image] compare these")
    # Without transcription an mp3 is answered with how to turn it on, without fetching it.
    assert sorted(env.dc.downloads) == ["a.png", "b.webp"]
    assert "mate.media.transcription" in refused["content"] and len(env.fa.messages_requests()) == 1
