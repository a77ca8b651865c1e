"""The web page in a real browser: Debian's chromium driven by Playwright (skipped where neither is installed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.api_env import Api, open_api
from tests.support.browser import CHROMIUM, TOKEN, browser, open_page  # noqa: F401  (browser: a fixture)

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium browser installed")]


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in open_api(tmp_path, token=TOKEN):
        yield opened


async def send(page: Any, text: str) -> None:
    await page.fill("#text", text)
    await page.press("#text", "Enter")


async def test_a_streamed_reply_renders_markdown_and_never_model_html(browser: Any, api: Api) -> None:
    api.fake.reply_text("Here is **bold** and `code`.\n\n- one\n- two\n\n<img src=x onerror=\"window.pwned=1\">")
    page = await open_page(browser, api)
    assert "#token" not in page.url  # the token left the address bar
    await send(page, "hello")
    await page.wait_for_selector(".msg.bot strong")
    bot = page.locator(".msg.bot").last
    assert await bot.locator("strong").inner_text() == "bold"
    assert await bot.locator("li").count() == 2
    assert await bot.locator("img").count() == 0  # shown as text, not as an element
    assert "<img src=x" in await bot.inner_text()
    assert await page.evaluate("window.pwned") is None
    assert page.errors == []


async def test_a_reload_keeps_the_conversation_and_lists_it(browser: Any, api: Api) -> None:
    api.fake.reply_text("Nice to meet you, Ada.")
    page = await open_page(browser, api)
    await send(page, "I am Ada")
    await page.wait_for_function("document.querySelector('.msg.bot')?.textContent.includes('Ada')")
    await page.wait_for_selector("#conversation-list button")
    await page.reload()
    await page.wait_for_selector(".msg.bot")
    texts = await page.locator(".msg").all_inner_texts()
    assert texts == ["I am Ada", "Nice to meet you, Ada."]
    assert await page.locator("#conversation-list button.current").count() == 1


async def test_memory_edit_saves_and_a_stale_edit_overwrites_nothing(browser: Any, api: Api) -> None:
    page = await open_page(browser, api)
    await page.click("#files button:has-text('MEMORY.md')")
    await page.wait_for_selector("#editor-text")
    await page.fill("#editor-text", "- likes green tea\n")
    await page.click("#save")
    await page.wait_for_function("document.querySelector('#editor-note').textContent === 'Saved.'")
    assert (await api.rt.core.workspace.read_text(1, "MEMORY.md"))[0] == "- likes green tea\n"
    # someone else writes meanwhile (the memory extraction, another tab)
    current = await api.rt.core.workspace.get(1, "MEMORY.md")
    assert current is not None
    await api.rt.core.workspace.write(1, "MEMORY.md", "- written elsewhere\n", expected_version=current.version)
    await page.fill("#editor-text", "- my stale edit\n")
    await page.click("#save")
    await page.wait_for_function("document.querySelector('#editor-note').textContent.includes('nothing was overwritten')")
    assert (await api.rt.core.workspace.read_text(1, "MEMORY.md"))[0] == "- written elsewhere\n"


async def test_links_and_code_stay_inert_and_closed_chats_are_read_only(browser: Any, api: Api) -> None:
    api.fake.reply_text('[x](http://a/**b**) [click](javascript:alert(1)) `<b>` [q](http://a/"onmouseover="x)')
    repos = api.rt.core.repos
    await repos.conversations.create("web:old", agent_id=1, channel="web", chat_key="web:old", trigger_source="web")
    await repos.messages.add("web:old", "user", "an old question", 3)
    await repos.conversations.archive("web:old")
    page = await open_page(browser, api)
    await send(page, "links")
    await page.wait_for_selector(".msg.bot a")
    bot = page.locator(".msg.bot").last
    hrefs = [await link.get_attribute("href") for link in await bot.locator("a").all()]
    assert hrefs == ["http://a/**b**", 'http://a/"onmouseover="x']  # quotes stay inside the address
    assert await bot.locator("a[onmouseover]").count() == 0 and "javascript:alert(1)" in await bot.inner_text()
    assert await bot.locator("code").inner_text() == "<b>" and await bot.locator("b").count() == 0
    await page.click("#conversation-list button[data-id='web:old']")
    await page.wait_for_selector("text=an old question")
    assert not await page.locator("#composer").is_visible() and await page.locator("#readonly").is_visible()


async def test_search_finds_what_was_said(browser: Any, api: Api) -> None:
    api.fake.reply_text("Noted.")
    page = await open_page(browser, api)
    await send(page, "The spare key is under the blue pot.")
    await page.wait_for_function("document.querySelector('.msg.bot')?.textContent === 'Noted.'")
    await page.fill("#query", "spare key")
    await page.click("#search button")
    await page.wait_for_selector("#results .hit")
    assert "blue pot" in await page.locator("#results .hit").first.inner_text()


@pytest.mark.parametrize("width", [360, 390])
async def test_a_phone_sized_window_fits_and_reaches_every_panel(browser: Any, api: Api, width: int) -> None:
    page = await open_page(browser, api, width=width)
    overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    assert await page.locator("#composer").is_visible()
    await page.click("#toggle-memory")
    assert await page.locator("#files").is_visible() and not await page.locator("#composer").is_visible()
    box = await page.locator("#memory").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 1  # not cut off
    await page.click("#toggle-conversations")
    assert await page.locator("#conversations h2").is_visible() and not await page.locator("#files").is_visible()


async def test_a_picture_attached_on_the_page_reaches_the_model(browser: Any, api: Api, tmp_path: Path) -> None:
    from tests.support.media_files import picture

    shot = tmp_path / "shot.png"
    shot.write_bytes(picture(200, 100))
    api.fake.reply_text("A red rectangle.")
    page = await open_page(browser, api)
    await page.set_input_files("#pictures", str(shot))
    await page.wait_for_selector("#attached img")
    await send(page, "what is this?")
    await page.wait_for_function("document.querySelector('.msg.bot')?.textContent === 'A red rectangle.'")
    assert await page.locator(".msg.user img").count() == 1 and await page.locator("#attached img").count() == 0
    blocks = api.fake.messages_requests()[-1]["messages"][-1]["content"]
    assert [b["type"] for b in blocks] == ["image", "text"] and blocks[-1]["text"].endswith("[image] what is this?")
