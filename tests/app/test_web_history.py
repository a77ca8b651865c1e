"""The web page's memory history in a real browser: versions with a diff, a restore that is a
versioned write, and a proposed consolidation approved there (skipped without chromium/Playwright)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.api_env import Api, open_api
from tests.support.browser import CHROMIUM, TOKEN, browser, open_page, playwright_api  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason="no chromium browser installed")]
assert playwright_api is not None


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async for opened in open_api(tmp_path, token=TOKEN):
        yield opened


async def test_history_shows_a_diff_and_restores_an_older_version(browser: Any, api: Api) -> None:
    workspace = api.rt.core.workspace
    _, seed_version = await workspace.read_text(1, "MEMORY.md")
    await workspace.write(1, "MEMORY.md", "# Core memory\n\n- likes green tea\n", expected_version=seed_version,
                          change="tool")
    await workspace.write(1, "MEMORY.md", "# Core memory\n\n- likes coffee\n", expected_version=seed_version + 1,
                          change="api")
    page = await open_page(browser, api)
    await page.click("#files button:has-text('MEMORY.md')")
    await page.wait_for_function("document.querySelector('#editor-text').value.includes('coffee')")
    await page.click("#history-button")
    await page.wait_for_selector("#versions button")
    labels = await page.locator("#versions button").all_inner_texts()
    assert [label.split(" · ")[0] for label in labels] == ["v3", "v2", "v1"]
    assert labels[0].endswith("(current)") and "assistant's memory tool" in labels[1]

    await page.click("#versions button:has-text('v2')")
    await page.wait_for_selector("#version-diff .del")  # drawn by the click's handler, maybe a moment later
    assert await page.locator("#version-diff .del").all_inner_texts() == ["- - likes green tea"]
    assert await page.locator("#version-diff .add").all_inner_texts() == ["+ - likes coffee"]
    await page.click("#restore")
    await page.wait_for_function("document.querySelector('#history-note').textContent.startsWith('Restored v2')")
    content, version = await workspace.read_text(1, "MEMORY.md")
    assert (content, version) == ("# Core memory\n\n- likes green tea\n", 4)
    await page.wait_for_function("document.querySelector('#editor-text').value.includes('green tea')")
    latest = (await api.rt.core.repos.file_history.versions((await workspace.get(1, "MEMORY.md")).id, 1))[0]  # type: ignore[union-attr]
    assert (latest.version, latest.change) == (4, "api")

    # A restore onto a file that changed since it was opened overwrites nothing.
    await workspace.write(1, "MEMORY.md", "- written elsewhere\n", expected_version=4)
    await page.click("#versions button:has-text('v3')")
    await page.click("#restore")
    await page.wait_for_function("document.querySelector('#history-note').textContent.includes('nothing was restored')")
    assert (await workspace.read_text(1, "MEMORY.md"))[0] == "- written elsewhere\n"
    assert page.errors == []


async def test_a_proposed_consolidation_is_shown_and_approved_on_the_page(browser: Any, api: Api) -> None:
    assert api.rt.memory_services is not None
    review = api.rt.memory_services.review
    before, version = await api.rt.core.workspace.read_text(1, "MEMORY.md")
    await review.propose(1, "MEMORY.md", version, before, "# Core memory\n\n- likes tea\n", "tea, daily", None)
    page = await open_page(browser, api)
    await page.wait_for_selector("#proposal-diff .add")
    assert "+ - likes tea" in await page.locator("#proposal-diff .add").all_inner_texts()
    await page.click("#approve")
    await page.wait_for_selector("#proposal", state="hidden")
    assert (await api.rt.core.workspace.read_text(1, "MEMORY.md"))[0] == "# Core memory\n\n- likes tea\n"
    assert page.errors == []
