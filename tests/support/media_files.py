"""Small media a test attaches: pictures drawn on the fly, a one-page PDF, an Attachment around bytes."""

from __future__ import annotations

import io

from PIL import Image

from channels.base import IncomingFile


def picture(width: int, height: int, fmt: str = "PNG", color: tuple[int, ...] = (200, 40, 40)) -> bytes:
    out = io.BytesIO()
    mode = "RGBA" if len(color) == 4 else "RGB"
    Image.new(mode, (width, height), color).save(out, fmt)
    return out.getvalue()


PDF = (b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
       b"2 0 obj << /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >> endobj\n"
       b"3 0 obj << /Type /Page /Parent 2 0 R >> endobj\n4 0 obj << /Type /Page /Parent 2 0 R >> endobj\n%%EOF\n")


def attached(data: bytes, name: str = "", media_type: str = "", *, photo: bool = False,
             size: int | None = None) -> IncomingFile:
    async def read() -> bytes:
        return data

    return IncomingFile(name, media_type, len(data) if size is None else size, read, is_photo=photo)
