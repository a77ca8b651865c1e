"""Chromium driven by Playwright for the web page tests; a module that imports this is skipped where
Playwright is not installed."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.api_env import Api

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright_api = pytest.importorskip("playwright.async_api", reason="Playwright is not installed")
TOKEN = "browser-test-token-123"


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as pw:
        try:
            launched = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        except playwright_api.Error as exc:  # installed but not launchable here (a half-installed package)
            pytest.skip(f"chromium does not start: {str(exc).splitlines()[0]}")
        try:
            yield launched
        finally:
            await launched.close()


async def open_page(browser: Any, api: Api, width: int = 1280) -> Any:
    page = await browser.new_page(viewport={"width": width, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    await page.goto(f"{api.url}/#token={TOKEN}")
    return page
