"""Tests for message splitting and Markdown-to-Telegram-HTML conversion."""

from __future__ import annotations

import html
import re
from collections.abc import Callable

import pytest

from channels.formatting import (
    DISCORD_LIMIT,
    TELEGRAM_LIMIT,
    markdown_to_telegram_html,
    split_message,
    utf16_len,
)
from tests.support.formatting import TAG, TRICKY, assert_balanced

FENCE_LINE = re.compile(r"^[ \t]*(`{3,}|~{3,}).*$", re.MULTILINE)


def visible(text: str) -> str:
    """Non-whitespace content with fence lines removed, since the splitter adds/replaces those."""
    return "".join(FENCE_LINE.sub("", text).split())


def assert_fences_closed(chunk: str) -> None:
    lines = [ln.strip() for ln in chunk.split("\n") if FENCE_LINE.fullmatch(ln)]
    assert len(lines) % 2 == 0, chunk


PLATFORMS: list[tuple[int, Callable[[str], int]]] = [
    (TELEGRAM_LIMIT, utf16_len),
    (DISCORD_LIMIT, len),
]


# --------------------------------------------------------------------------- utf16_len


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("abc", 3), ("漢字", 2), ("😀", 2), ("a😀b", 4), ("👨‍👩‍👧", 8)],
)
def test_utf16_len(text: str, expected: int) -> None:
    assert utf16_len(text) == expected


# --------------------------------------------------------------------------- split_message


@pytest.mark.parametrize("text", ["", "hi", "  padded  \n\n", "x" * 2000, "😀" * 2048])
def test_short_text_unchanged(text: str) -> None:
    assert split_message(text, 4096, length=utf16_len) == [text]


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        split_message("abc", 0)


def test_paragraph_boundary_preferred_over_line() -> None:
    para1 = "first line\nsecond line"
    para2 = "third line\nfourth line"
    text = f"{para1}\n\n{para2}"
    # The limit fits para1 plus a line of para2, so only a paragraph preference splits here.
    assert split_message(text, len(para1) + 14) == [para1, para2]


def test_line_boundary_preferred_over_word() -> None:
    text = "alpha beta\ngamma delta epsilon"
    assert split_message(text, 18) == ["alpha beta", "gamma delta", "epsilon"]


def test_word_boundary_preferred_over_hard_cut() -> None:
    text = "lorem ipsum dolor sit amet"
    chunks = split_message(text, 12)
    assert chunks == ["lorem ipsum", "dolor sit", "amet"]


def test_single_long_word_is_hard_cut() -> None:
    word = "x" * 10_000
    chunks = split_message(word, 2000)
    assert chunks == ["x" * 2000] * 5


def test_hard_cut_respects_utf16_for_emoji() -> None:
    chunks = split_message("😀" * 3000, 4096, length=utf16_len)
    assert [utf16_len(c) for c in chunks] == [4096, 1904]


def test_hard_cut_does_not_split_zwj_sequence() -> None:
    family = "👨‍👩‍👧"
    chunks = split_message(family * 50, 30, length=utf16_len)
    assert all(c.startswith("👨") and c.endswith("👧") for c in chunks)
    assert "".join(chunks) == family * 50


def _mixed_text() -> str:
    parts = []
    for i in range(200):
        parts.append(f"Paragraph {i}: " + "漢字かな 😀 emoji and words " * (i % 13 + 1))
        if i % 7 == 0:
            parts.append("line a\nline b 🎉\n" * (i % 5 + 1))
        if i % 11 == 0:
            parts.append("```python\n" + "print('😀 漢字')\n" * 30 + "```")
        if i % 17 == 0:
            parts.append("🙂" * 5000)
    return "\n\n".join(parts)


@pytest.mark.parametrize(("limit", "length"), PLATFORMS)
def test_every_chunk_within_limit(limit: int, length: Callable[[str], int]) -> None:
    text = _mixed_text()
    chunks = split_message(text, limit, length=length)
    assert len(chunks) > 1
    for chunk in chunks:
        assert 0 < length(chunk) <= limit
        assert chunk.strip()
        assert_fences_closed(chunk)


@pytest.mark.parametrize(("limit", "length"), [*PLATFORMS, (100, len), (37, utf16_len)])
def test_non_whitespace_content_preserved(limit: int, length: Callable[[str], int]) -> None:
    text = _mixed_text()
    chunks = split_message(text, limit, length=length)
    assert visible("\n".join(chunks)) == visible(text)


@pytest.mark.parametrize("lang", ["python", "js", ""])
@pytest.mark.parametrize(("limit", "length"), [*PLATFORMS, (300, len)])
def test_long_fenced_code_block_reopened(
    lang: str, limit: int, length: Callable[[str], int]
) -> None:
    code = "\n".join(f"    value_{i} = compute({i}) * 2  # 😀 step" for i in range(800))
    text = f"Here is the code:\n\n```{lang}\n{code}\n```\n\nThat's all."
    chunks = split_message(text, limit, length=length)
    code_chunks = [c for c in chunks if "value_" in c]
    assert len(code_chunks) >= 3
    assert chunks[0] == "Here is the code:"
    for chunk in code_chunks:
        assert length(chunk) <= limit
        assert chunk.startswith(f"```{lang}\n")
        assert_fences_closed(chunk)
    for chunk in code_chunks[:-1]:
        assert chunk.endswith("\n```")
    # Code indentation survives the reopen.
    assert all(c.split("\n")[1].startswith("    value_") for c in code_chunks)
    assert visible("\n".join(chunks)) == visible(text)


def test_fence_opener_never_stranded_from_its_code() -> None:
    fenced = "```py\n" + "x" * 30 + "\n```"
    assert split_message("a" * 30 + "\n" + fenced, 40) == ["a" * 30, fenced]


def test_unclosed_fence_reopened_in_later_chunks() -> None:
    text = "```sh\n" + "echo hello world\n" * 100
    chunks = split_message(text, 200)
    assert all(c.startswith("```sh\n") for c in chunks)
    assert all(c.endswith("\n```") for c in chunks[:-1])
    assert all(len(c) <= 200 for c in chunks)


def test_tiny_limit_still_respected_with_fences() -> None:
    text = "```python\n" + "abcdef\n" * 20 + "```"
    chunks = split_message(text, 8)
    assert all(len(c) <= 8 and c.strip() for c in chunks)


def test_no_blank_chunks_from_whitespace_runs() -> None:
    text = "a" + " " * 5000 + "b" + "\n" * 5000 + "c"
    assert split_message(text, 100) == ["a", "b", "c"]


@pytest.mark.parametrize(("limit", "length"), PLATFORMS)
def test_one_megabyte_input_splits(limit: int, length: Callable[[str], int]) -> None:
    text = (_mixed_text() * 20)[:1_000_000]
    chunks = split_message(text, limit, length=length)
    assert all(length(c) <= limit for c in chunks)


# --------------------------------------------------------------------------- Telegram HTML


@pytest.mark.parametrize(
    ("md", "expected"),
    [
        ("plain & <b>", "plain &amp; &lt;b&gt;"),
        ("**bold**", "<b>bold</b>"),
        ("*italic* and _also_", "<i>italic</i> and <i>also</i>"),
        ("***both***", "<b><i>both</i></b>"),
        ("~~gone~~", "<s>gone</s>"),
        ("use `a<b && **c**`", "use <code>a&lt;b &amp;&amp; **c**</code>"),
        ("``has ` tick``", "<code>has ` tick</code>"),
        ("**bold `code`**", "<b>bold <code>code</code></b>"),
        (
            "[site](https://ex.com/a_b_c?x=1&y=2)",
            '<a href="https://ex.com/a_b_c?x=1&amp;y=2">site</a>',
        ),
        ("[**b**](https://x.y)", '<a href="https://x.y"><b>b</b></a>'),
        ("[bad](javascript:alert(1))", "[bad](javascript:alert(1))"),
        ("# Title", "<b>Title</b>"),
        ("## **Title**", "<b>Title</b>"),
        ("### a < b ###", "<b>a &lt; b</b>"),
        ("#hashtag", "#hashtag"),
        ("snake_case_names_here", "snake_case_names_here"),
        ("call __init__ now", "call __init__ now"),
        ("2*3*4 = 24", "2*3*4 = 24"),
        ("a * b * c", "a * b * c"),
        ("x**2 + y**2", "x**2 + y**2"),
        ("中文**粗体**中文", "中文<b>粗体</b>中文"),
        ("## **Bold** heading *it*", "<b>Bold heading <i>it</i></b>"),
        ("see https://x.com/_path_ ok", "see https://x.com/_path_ ok"),
        (r"\*not italic\*", "*not italic*"),
        (
            "```python\nif a < b and c:\n    print(**kw)\n```",
            '<pre><code class="language-python">if a &lt; b and c:\n    print(**kw)</code></pre>',
        ),
        ("```\nx & y\n```", "<pre>x &amp; y</pre>"),
        ("```evil\"lang\nx\n```", "<pre>x</pre>"),
        (
            "text\n```js\nlet a = 1;\n```\nafter **b**",
            'text\n<pre><code class="language-js">let a = 1;</code></pre>\nafter <b>b</b>',
        ),
    ],
)
def test_markdown_conversion(md: str, expected: str) -> None:
    out = markdown_to_telegram_html(md)
    assert out == expected
    assert_balanced(out)


@pytest.mark.parametrize("md", TRICKY)
def test_tricky_markdown_balanced(md: str) -> None:
    out = markdown_to_telegram_html(md)
    assert_balanced(out)
    # Degrading must never drop text: every word survives as text, a link target or a language.
    attributes = " ".join(re.findall(r'="([^"]*)"', out))
    plain = html.unescape(TAG.sub("", out) + " " + attributes)
    for word in re.findall(r"[A-Za-z0-9]+", md.replace("\x00", " ")):
        assert word in plain


def test_snake_case_never_italic() -> None:
    out = markdown_to_telegram_html("set max_retry_count and my_var_name_x, then _emph_")
    assert out == "set max_retry_count and my_var_name_x, then <i>emph</i>"
