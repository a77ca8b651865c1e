"""Photos and files: what the model is sent, what the history keeps, what is refused (SPEC S21)."""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from bot.core.config import MediaConfig
from bot.media.preparer import MediaPreparer, MediaRefused, image_tokens
from channels.base import IncomingFile
from tests.support.fakes.anthropic import untimed
from tests.support.media_files import PDF, attached, picture


def decoded(block: dict[str, Any]) -> bytes:
    return base64.b64decode(block["source"]["data"])


@pytest.fixture
def preparer(tmp_path: Path) -> MediaPreparer:
    return MediaPreparer(MediaConfig(max_file_mb=1, max_files=3), tmp_path / "media")


async def test_a_large_photo_is_scaled_to_1568_and_kept_by_its_hash(preparer: MediaPreparer, tmp_path: Path) -> None:
    prepared = await preparer.prepare([attached(picture(3136, 2000, "JPEG"), photo=True)])
    [block] = prepared.blocks
    assert block["type"] == "image" and block["source"]["media_type"] == "image/jpeg"
    with Image.open(io.BytesIO(decoded(block))) as image:
        assert image.size == (1568, 1000)
    stored = tmp_path / "media" / f"{hashlib.sha256(decoded(block)).hexdigest()}.jpeg"
    assert stored.read_bytes() == decoded(block)
    assert prepared.tokens == image_tokens(1568, 1000) == 1600  # capped, as the provider scales
    assert prepared.history_text("what is this?") == "[image] what is this?"


async def test_a_small_image_is_sent_as_it_came(preparer: MediaPreparer) -> None:
    data = picture(400, 300, "PNG", (0, 0, 0, 128))
    prepared = await preparer.prepare([attached(data, "shot.png", "image/png")])
    assert decoded(prepared.blocks[0]) == data and prepared.blocks[0]["source"]["media_type"] == "image/png"
    assert prepared.tokens == 160


async def test_an_image_in_another_format_is_converted(preparer: MediaPreparer) -> None:
    prepared = await preparer.prepare([attached(picture(50, 40, "BMP"), "scan.bmp", "image/bmp")])
    assert prepared.blocks[0]["source"]["media_type"] == "image/jpeg"


async def test_text_files_arrive_as_text_and_pdfs_as_documents(preparer: MediaPreparer) -> None:
    notes = "# Shopping\n- milk\n- 茶\n".encode()
    prepared = await preparer.prepare([attached(notes, "list.md", "text/markdown"),
                                       attached(PDF, "report.pdf", "application/pdf")])
    assert [b["type"] for b in prepared.blocks] == ["document"]
    assert prepared.blocks[0]["source"]["media_type"] == "application/pdf"
    assert prepared.tokens == 2 * 3000  # two pages
    assert prepared.history_text("read these") == (
        "[document: report.pdf] read these\n\n[file: list.md]\n# Shopping\n- milk\n- 茶\n")


@pytest.mark.parametrize(("files", "key"), [
    ([attached(b"x" * 10, "a.txt")] * 4, "media_too_many"),
    ([attached(b"", "huge.mp4", size=50 * 1024 * 1024)], "media_too_large"),
    ([attached(b"PK\x03\x04 zip data", "archive.zip", "application/zip")], "media_unsupported"),
    ([attached(b"\x00\x01\x02binary", "data.txt", "text/plain")], "media_unsupported"),
    ([attached(b"\xff\xfe\xfa not utf-8", "notes.txt", "text/plain")], "media_unsupported"),
    ([attached(b"a" * (300 * 1024), "big.log", "text/plain")], "media_text_too_large"),
    ([attached(b"GIF89a broken", "x.gif", "image/gif")], "media_unsupported"),
])
async def test_what_cannot_be_read_gets_a_named_answer(preparer: MediaPreparer, files: list[IncomingFile],
                                                       key: str) -> None:
    with pytest.raises(MediaRefused) as refused:
        await preparer.prepare(files)
    assert refused.value.key == key


async def test_a_failed_download_is_answered(preparer: MediaPreparer) -> None:
    async def broken() -> bytes:
        raise ConnectionError("reset")

    with pytest.raises(MediaRefused) as refused:
        await preparer.prepare([IncomingFile("x.png", "image/png", 10, broken)])
    assert refused.value.key == "media_download_failed"


# -- end to end, through the web routes, the agent and the fake Messages API ---------------------


async def test_web_images_reach_the_model_once_then_the_history_keeps_a_marker(tmp_path: Path) -> None:
    from tests.support.api_env import open_api

    image = base64.b64encode(picture(2000, 1000, "PNG")).decode()
    async for api in open_api(tmp_path):
        api.fake.reply_text("A red rectangle.")
        status, body = await api.call("POST", "/api/v1/chat/1", json={
            "message": "what is this?", "images": [{"media_type": "image/png", "data": image}]})
        conversation = body["data"]["conversationId"]
        api.fake.reply_text("Red.")
        await api.call("POST", "/api/v1/chat/1", json={"message": "which colour?", "conversationId": conversation})
        bad = await api.call("POST", "/api/v1/chat/1", json={"images": [{"media_type": "image/png", "data": "%%%"}]})
        stored = [m.content for m in await api.rt.core.repos.messages.after(conversation, 0)]
        kept = list((tmp_path / "media").glob("*.png"))

    assert status == 200 and body["data"]["reply"] == "A red rectangle."
    first, second = api.fake.messages_requests()
    current = first["messages"][-1]["content"]
    images = [b for b in current if b["type"] == "image"]
    assert len(images) == 1 and untimed(current[-1]["text"]) == "[image] what is this?"
    with Image.open(io.BytesIO(decoded(images[0]))) as sent:
        assert sent.size == (1568, 784)
    earlier = second["messages"][0]["content"]
    # Sent again with the time label it first had, so the server's prompt cache holds (S34).
    assert (untimed(earlier) if isinstance(earlier, str) else [b["type"] for b in earlier]) in (
        "[image] what is this?", ["text"])
    assert stored[0] == "[image] what is this?"
    assert bad[0] == 400
    assert len(kept) == 1  # data/media/<sha256>.png beside the database


async def test_a_tiny_file_with_huge_dimensions_is_refused_before_decoding(preparer: MediaPreparer) -> None:
    out = io.BytesIO()
    Image.new("1", (8000, 6000)).save(out, "PNG")  # 48 megapixels in a few kilobytes
    with pytest.raises(MediaRefused) as refused:
        await preparer.prepare([attached(out.getvalue(), "bomb.png", "image/png")])
    assert refused.value.key == "media_unsupported"


async def test_a_photo_turned_by_its_exif_tag_is_sent_upright(preparer: MediaPreparer) -> None:
    image = Image.new("RGB", (120, 60), (10, 200, 10))
    exif = image.getexif()
    exif[0x0112] = 6  # "rotate 90° clockwise to view"
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif)
    prepared = await preparer.prepare([attached(out.getvalue(), photo=True)])
    with Image.open(io.BytesIO(decoded(prepared.blocks[0]))) as sent:
        assert sent.size == (60, 120)


async def test_pdf_pages_in_compressed_object_streams_are_counted(preparer: MediaPreparer) -> None:
    import zlib

    pages = b"".join(b"%d 0 obj << /Type /Page /Parent 2 0 R >> endobj " % i for i in range(120))
    pdf = (b"%PDF-1.5\n5 0 obj << /Type /ObjStm /Filter /FlateDecode >>\nstream\n" + zlib.compress(pages)
           + b"\nendstream\nendobj\n%%EOF\n")
    with pytest.raises(MediaRefused) as refused:
        await preparer.prepare([attached(pdf, "paper.pdf", "application/pdf")])
    assert refused.value.key == "media_pdf_too_long"


async def test_files_too_large_together_are_refused(preparer: MediaPreparer, monkeypatch: pytest.MonkeyPatch) -> None:
    import bot.media.preparer

    monkeypatch.setattr(bot.media.preparer, "MAX_MESSAGE_BYTES", 250)
    one = picture(40, 40, "PNG", (1, 2, 3))
    assert len(one) < 250
    with pytest.raises(MediaRefused) as refused:
        await preparer.prepare([attached(one, "a.png"), attached(picture(41, 40), "b.png"),
                                attached(picture(42, 40), "c.png")])
    assert refused.value.key == "media_too_large_together"


async def test_a_media_folder_that_cannot_be_written_still_answers(tmp_path: Path) -> None:
    blocked = tmp_path / "media"
    blocked.write_text("a file where the folder should be")
    prepared = await MediaPreparer(MediaConfig(), blocked).prepare([attached(picture(30, 30), photo=True)])
    assert prepared.blocks[0]["type"] == "image"
