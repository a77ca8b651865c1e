"""One set of Markdown rules: Telegram's renderer and the web page's follow docs/markdown.md and agree."""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from channels.formatting import markdown_to_telegram_html
from tests.support.formatting import TRICKY, assert_balanced

DOC = Path(__file__).resolve().parents[2] / "docs" / "markdown.md"


def documented_examples() -> list[dict[str, str]]:
    """The examples block of docs/markdown.md: one JSON object a line."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split("## Examples", 1)[1].split("```jsonl\n", 1)[1].split("\n```", 1)[0]
    return [json.loads(line) for line in block.splitlines() if line.strip()]


EXAMPLES = documented_examples()

# Fragments models write, glued at random: a seeded, repeatable sample of messy Markdown.
_PIECES = [
    "**", "*", "***", "_", "__", "~~", "`", "``", "```", "```py", "~~~", "[", "]", "(", ")", "](", "![",
    "http://x.y/a_b", "https://e.com", "javascript:x", "tg://x", "mailto:a@b", "#", "## ", "- ", "* ", "+ ",
    "1. ", "3) ", "> ", "|", "---", "\n", "\n", "\n\n", "\r\n", " ", " ", "  ", "    ", "\t", "\u00a0", "\u3000",
    "a", "b", "word", "x2", "x**2", "snake_case", "é", "中文", "_中_", "１", "\\", "\\*", "<b>", "&", "'", '"', ">",
    "_x_", "**x**", "~~x~~", "`c`", "[l](https://a.b)", "(x)",
]


def messy_samples(count: int, seed: int = 26) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 25))) for _ in range(count)]


# -- the structure both renderers must agree on ----------------------------------------

_KINDS = {"b": "bold", "strong": "bold", "h4": "bold", "i": "italic", "em": "italic", "s": "strike",
          "code": "code", "a": "link", "pre": "pre"}
_LIST_MARKER = re.compile(r"[-*+]|\d+[.)]")


class _Structure(HTMLParser):
    """Words and formatting, whatever the tag names and block layout of the platform."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "code" and self.open and self.open[-1] == "pre":
            # Telegram writes <pre> alone when there is no language; the page always <pre><code>.
            self.open.append("")
            self.parts.append(f" {attributes.get('class') or ''} ")
            return
        self.open.append(tag)
        href = attributes.get("href")
        # Paragraphs and list items are the page's layout of lines: a word break, no more.
        self.parts.append(f" [{_KINDS[tag]}{':' + href if href else ''} " if tag in _KINDS else " ")

    def handle_endtag(self, tag: str) -> None:
        name = self.open.pop()
        self.parts.append(f" ]{_KINDS[name]} " if name in _KINDS else " ")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def structure(html: str) -> list[str]:
    """The words and formatting marks of rendered HTML; list markers left out (Telegram shows
    them as text, the page as list items)."""
    parser = _Structure()
    parser.feed(html)
    parser.close()
    assert not parser.open, html
    return [word for word in "".join(parser.parts).split() if not _LIST_MARKER.fullmatch(word)]


# -- Telegram ---------------------------------------------------------------------------


def test_the_document_has_examples_of_every_rule() -> None:
    telegram = " ".join(e["telegram"] for e in EXAMPLES)
    page = " ".join(e["page"] for e in EXAMPLES)
    for tag in ("<b>", "<i>", "<s>", "<code>", "<pre>", '<code class="language-', "<a href="):
        assert tag in telegram
    for tag in ("<strong>", "<em>", "<s>", "<code>", "<pre>", "<a href=", "<h4>", "<ul>", "<ol>", "<li>"):
        assert tag in page


@pytest.mark.parametrize("example", EXAMPLES, ids=[e["markdown"][:30] for e in EXAMPLES])
def test_telegram_renders_each_documented_example(example: dict[str, str]) -> None:
    out = markdown_to_telegram_html(example["markdown"])
    assert out == example["telegram"]
    assert_balanced(out)


def test_a_code_span_in_a_link_address_never_puts_markup_in_the_href() -> None:
    out = markdown_to_telegram_html("see [the docs](https://ex.com/`v2`/api) now")
    assert out == "see [the docs](https://ex.com/<code>v2</code>/api) now"
    assert_balanced(out)


def test_telegram_html_stays_balanced_on_messy_markdown() -> None:
    for md in messy_samples(3000):
        assert_balanced(markdown_to_telegram_html(md))


# -- the web page, in a real browser ----------------------------------------------------

PageMarkdown = Callable[[list[str]], Awaitable[list[str]]]
_ORIGIN = "http://matebot.test"


@pytest.fixture
async def page_markdown() -> AsyncIterator[PageMarkdown]:
    """The page's own markdown(), run by chromium on the shipped index.html."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium browser installed")
    playwright_api = pytest.importorskip("playwright.async_api", reason="Playwright is not installed")
    index = resources.files("bot.app").joinpath("web", "index.html").read_text(encoding="utf-8")

    async def serve(route: Any) -> None:
        if route.request.url.rstrip("/") == _ORIGIN:
            await route.fulfill(status=200, content_type="text/html", body=index)
        else:  # the page's own API calls: no daemon here
            await route.fulfill(status=401, content_type="application/json", body='{"msg": "no daemon"}')

    async with playwright_api.async_playwright() as pw:
        try:
            browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        except playwright_api.Error as exc:
            pytest.skip(f"chromium does not start: {str(exc).splitlines()[0]}")
        try:
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.route(f"{_ORIGIN}/**", serve)
            await page.goto(f"{_ORIGIN}/")

            async def render(samples: list[str]) -> list[str]:
                rendered: list[str] = await page.evaluate("(samples) => samples.map(markdown)", samples)
                return rendered

            yield render
            assert errors == []
        finally:
            await browser.close()


@pytest.mark.browser
async def test_the_page_renders_each_documented_example(page_markdown: PageMarkdown) -> None:
    rendered = await page_markdown([e["markdown"] for e in EXAMPLES])
    mismatches = [(e["markdown"], e["page"], got) for e, got in zip(EXAMPLES, rendered) if got != e["page"]]
    assert mismatches == []


@pytest.mark.browser
async def test_the_page_and_telegram_agree_on_the_structure_of_any_text(page_markdown: PageMarkdown) -> None:
    samples = [e["markdown"] for e in EXAMPLES] + list(TRICKY) + messy_samples(3000)
    rendered = await page_markdown(samples)
    disagreements = [
        (md, markdown_to_telegram_html(md), page)
        for md, page in zip(samples, rendered)
        if structure(markdown_to_telegram_html(md)) != structure(page)
    ]
    assert disagreements[:5] == [] and len(disagreements) == 0
