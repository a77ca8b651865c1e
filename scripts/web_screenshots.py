"""Screenshots of the web page at 1280 px and 390 px, for the README.

Usage: python scripts/web_screenshots.py [OUT_DIR]   (default docs/screenshots)

Runs the real daemon pieces (runtime, API server) against the fake Messages API of
tests/, has a short chat with a markdown answer, opens MEMORY.md in the editor, and takes
web-1280.png (the whole page) and web-390.png (the chat as a phone shows it). Needs
Playwright and Debian's chromium (`apt-get install chromium`, `pip install playwright`).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.async_api import async_playwright

from bot.app.api.server import ApiServer
from bot.llm import AnthropicClient
from bot.app.runtime import open_runtime
from tests.conftest import make_config
from tests.support.fakes.anthropic import FakeAnthropic

TOKEN = "screenshot-token-123"
ANSWER = ("Here is your week, **Ada**:\n\n- Monday: dentist at `15:00`\n- Wednesday: Hannah's flight to Lisbon\n"
          "- Friday: team dinner\n\nI noted the dentist appointment in MEMORY.md.")


async def main(out: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium browser installed (apt-get install chromium)")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        async with FakeAnthropic() as fake:
            config = make_config(Path(folder), llm={"api-key": "k", "base-url": fake.url, "max-retries": 0},
                                 api={"port": 0, "token": TOKEN})
            async with AnthropicClient(config.mate.llm) as llm, open_runtime(config, llm=llm) as rt, \
                    ApiServer(rt, config.mate.api) as server, async_playwright() as pw:
                await rt.core.workspace.write(1, "MEMORY.md", "# Memory\n\n- Dentist on Monday at 15:00\n"
                                              "- Hannah moved to Lisbon\n")
                browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                url = f"http://127.0.0.1:{server.port}/#token={TOKEN}"
                fake.reply_text(ANSWER)
                page = await browser.new_page(viewport={"width": 1280, "height": 760})
                await page.goto(url)
                await page.fill("#text", "What is on this week?")
                await page.press("#text", "Enter")
                await page.wait_for_selector(".msg.bot li")
                await page.click("#files button:has-text('MEMORY.md')")
                await page.wait_for_selector("#editor-text")
                await page.screenshot(path=str(out / "web-1280.png"))
                await page.set_viewport_size({"width": 390, "height": 760})
                await page.reload()
                await page.wait_for_selector(".msg.bot li")  # the conversation reloads from history
                await page.screenshot(path=str(out / "web-390.png"))
                await browser.close()
    print(f"wrote {out / 'web-1280.png'} and {out / 'web-390.png'}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshots"))
