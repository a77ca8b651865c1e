"""The web page after the fourth attack (SPEC S33), in a real browser: the agent box, names, a new chat.

Debian's chromium driven by Playwright; skipped where either is missing.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.api_env import Api, TWO_AGENTS, open_api


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright_api = pytest.importorskip("playwright.async_api", reason="Playwright is not installed")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium browser installed")]

TOKEN = "browser-hardening-token-456"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in open_api(tmp_path, token=TOKEN, **TWO_AGENTS):
        yield opened


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


async def open_page(browser: Any, api: Api) -> Any:
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    await page.goto(f"{api.url}/#token={TOKEN}")
    return page


async def choose_agent(page: Any, agent_id: int) -> None:
    await page.wait_for_selector(f"#agent option[value='{agent_id}']", state="attached")
    await page.select_option("#agent", str(agent_id))


async def test_changing_agent_reloads_the_editor_and_a_save_goes_to_the_file_shown(browser: Any, api: Api) -> None:
    workspace = api.rt.core.workspace
    await workspace.write(2, "SOUL.md", "the friend's soul\n", expected_version=1)
    await workspace.write(2, "NOTES.md", "only the friend has notes\n", expected_version=0)
    owner_soul, _ = await workspace.read_text(1, "SOUL.md")
    page = await open_page(browser, api)
    await page.click("#files button:has-text('SOUL.md')")
    await page.wait_for_function("document.querySelector('#editor-text').value.length > 0")
    assert await page.input_value("#editor-text") == owner_soul
    await choose_agent(page, 2)
    # the editor now holds agent 2's SOUL.md, and the file list is agent 2's
    await page.wait_for_function("document.querySelector('#editor-text').value === \"the friend's soul\\n\"")
    await page.wait_for_selector("#files button:has-text('NOTES.md')")
    await page.fill("#editor-text", "the friend, edited\n")
    await page.click("#save")
    await page.wait_for_function("document.querySelector('#editor-note').textContent === 'Saved.'")
    assert (await workspace.read_text(2, "SOUL.md"))[0] == "the friend, edited\n"
    assert (await workspace.read_text(1, "SOUL.md"))[0] == owner_soul
    # back to agent 1: agent 2's NOTES.md leaves the list and its editor closes
    await page.click("#files button:has-text('NOTES.md')")
    await page.wait_for_function("document.querySelector('#editor-text').value.startsWith('only the friend')")
    await choose_agent(page, 1)
    await page.wait_for_selector("#files button:has-text('NOTES.md')", state="detached")
    assert not await page.locator("#editor").is_visible()
    assert page.errors == []


async def test_a_search_follows_the_agent_box(browser: Any, api: Api) -> None:
    await api.rt.core.workspace.write(1, "NOTES.md", "the spare key is under the blue pot\n", expected_version=0)
    await api.rt.core.workspace.write(2, "NOTES.md", "the spare key is with the neighbour\n", expected_version=0)
    page = await open_page(browser, api)
    await page.fill("#query", "spare key")
    await page.click("#search button")
    await page.wait_for_selector("#results .hit:has-text('blue pot')")
    await choose_agent(page, 2)
    await page.wait_for_selector("#results .hit:has-text('neighbour')")
    assert await page.locator("#results .hit:has-text('blue pot')").count() == 0


async def test_conversations_and_agents_are_shown_by_name(browser: Any, api: Api) -> None:
    repos = api.rt.core.repos
    await repos.conversations.create("tg:111", agent_id=1, channel="telegram", chat_key="tg:111",
                                     trigger_source="telegram")
    await repos.messages.add_user("tg:111", "hi from Telegram", 3, sender_id="111", sender_name="alice_tg")
    await repos.conversations.create("tg:-100555", agent_id=1, channel="telegram", chat_key="tg:-100555",
                                     trigger_source="telegram", title="Family", is_group=True)
    await repos.messages.add_user("tg:-100555", "hi all", 2, sender_id="111", sender_name="alice_tg")
    page = await open_page(browser, api)
    await page.wait_for_selector("#conversation-list button[data-id='tg:111']")
    assert (await page.locator("#conversation-list button[data-id='tg:111']").inner_text()).startswith(
        "Alice (Telegram)")
    assert (await page.locator("#conversation-list button[data-id='tg:-100555']").inner_text()).startswith(
        "Group: Family (Telegram)")
    await page.wait_for_function("document.querySelectorAll('#agent option').length === 2")
    assert await page.locator("#agent option").all_inner_texts() == ["Mate", "Buddy"]


async def test_the_page_opens_on_a_new_chat_ready_to_type_in(browser: Any, api: Api) -> None:
    api.fake.reply_text("Hello there.")
    page = await open_page(browser, api)
    await page.wait_for_selector("#files button")  # the page has loaded what it shows
    await page.wait_for_function("document.querySelector('#log .intro')?.textContent.includes('Mate')")
    intro = await page.locator("#log .intro").inner_text()
    assert intro.startswith("New chat with Mate.")
    assert await page.locator("#composer").is_visible()
    assert await page.evaluate("document.activeElement.id") == "text"
    await page.keyboard.type("hi")
    await page.press("#text", "Enter")
    await page.wait_for_function("document.querySelector('.msg.bot')?.textContent === 'Hello there.'")
    assert await page.locator("#log .intro").count() == 0
    assert await page.locator(".msg").all_inner_texts() == ["hi", "Hello there."]


async def held_put(page: Any) -> tuple[asyncio.Future[Any], list[Any]]:
    """Hold the page's next PUT until the test lets it go; returns (the held route's future, requests seen)."""
    held: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    seen: list[Any] = []

    async def hold(route: Any) -> None:
        if route.request.method == "PUT" and not held.done():
            held.set_result(route)
        else:
            await route.continue_()

    await page.route("**/api/v1/memory/**", hold)
    page.on("request", lambda request: seen.append(request))
    return held, seen


def file_list_of(agent_id: int) -> Any:
    return lambda request: request.method == "GET" and request.url.endswith(f"/api/v1/memory/{agent_id}/files")


async def test_a_save_answered_after_the_agent_changed_leaves_the_new_editor_alone(browser: Any, api: Api) -> None:
    workspace = api.rt.core.workspace
    await workspace.write(2, "SOUL.md", "the friend's soul\n", expected_version=1)
    await workspace.write(2, "SOUL.md", "the friend's soul, again\n", expected_version=2)  # version 3 now
    await workspace.write(2, "NOTES.md", "only the friend has notes\n", expected_version=0)
    page = await open_page(browser, api)
    held, _ = await held_put(page)
    await page.click("#files button:has-text('SOUL.md')")
    await page.wait_for_function("document.querySelector('#editor-text').value.length > 0")
    await page.fill("#editor-text", "the owner's soul, edited\n")
    await page.click("#save")
    route = await held  # the owner's save is on its way when the agent box changes
    await choose_agent(page, 2)
    await page.wait_for_function("document.querySelector('#editor-text').value === \"the friend's soul, again\\n\"")
    await page.wait_for_selector("#files button:has-text('NOTES.md')")
    async with page.expect_request(file_list_of(2)):  # the save's answer was handled when it lists the files
        await route.continue_()
    assert await workspace.read_text(1, "SOUL.md") == ("the owner's soul, edited\n", 2)
    assert await page.inner_text("#editor-note") == ""
    assert "saved" not in await page.inner_text("#editor-version")
    # agent 2's editor kept its own version: saving it now is no conflict
    await page.fill("#editor-text", "the friend, edited\n")
    await page.click("#save")
    await page.wait_for_function("document.querySelector('#editor-note').textContent === 'Saved.'")
    assert await workspace.read_text(2, "SOUL.md") == ("the friend, edited\n", 4)
    assert page.errors == []


async def test_a_save_answered_after_the_editor_closed_says_nothing_wrong(browser: Any, api: Api) -> None:
    workspace = api.rt.core.workspace
    await workspace.write(1, "NOTES.md", "the owner's notes\n", expected_version=0)
    page = await open_page(browser, api)
    held, _ = await held_put(page)
    await page.click("#files button:has-text('NOTES.md')")
    await page.wait_for_function("document.querySelector('#editor-text').value.length > 0")
    await page.fill("#editor-text", "the owner's notes, edited\n")
    await page.click("#save")
    route = await held
    await choose_agent(page, 2)  # agent 2 has no NOTES.md: the editor closes
    await page.wait_for_selector("#editor", state="hidden")
    async with page.expect_request(file_list_of(2)):
        await route.continue_()
    assert await workspace.read_text(1, "NOTES.md") == ("the owner's notes, edited\n", 2)
    assert await page.locator("#editor-note").text_content() == ""  # no "Cannot set properties of null"
    assert page.errors == []


async def test_a_restore_answered_after_the_agent_changed_does_not_act_on_the_new_file(browser: Any,
                                                                                     api: Api) -> None:
    workspace = api.rt.core.workspace
    owner_soul, _ = await workspace.read_text(1, "SOUL.md")
    await workspace.write(1, "SOUL.md", "the owner's soul, changed\n", expected_version=1)
    await workspace.write(2, "SOUL.md", "the friend's soul\n", expected_version=1)
    await workspace.write(2, "NOTES.md", "only the friend has notes\n", expected_version=0)
    page = await open_page(browser, api)
    held, seen = await held_put(page)
    await page.click("#files button:has-text('SOUL.md')")
    await page.wait_for_function("document.querySelector('#editor-text').value.includes('changed')")
    await page.click("#history-button")
    await page.click("#versions button:has-text('v1')")
    await page.click("#restore")
    route = await held
    await choose_agent(page, 2)
    await page.wait_for_function("document.querySelector('#editor-text').value === \"the friend's soul\\n\"")
    await page.wait_for_selector("#files button:has-text('NOTES.md')")
    before = len(seen)
    async with page.expect_request(file_list_of(2)):
        await route.continue_()
    assert await workspace.read_text(1, "SOUL.md") == (owner_soul, 3)
    # the answer about agent 1's file reloads neither agent 2's file nor its history
    assert [r.url for r in seen[before:] if "/files/" in r.url] == []
    assert not await page.locator("#history").is_visible()
    assert page.errors == []
