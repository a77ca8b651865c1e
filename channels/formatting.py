"""Split long replies into platform-sized chunks and render LLM Markdown as Telegram HTML.

What each piece of Markdown becomes (bold, italic, code, links, headings, lists, what is
escaped, how the rest degrades) is written down once, in docs/markdown.md; the web page
(bot/app/web/index.html) renders by the same rules, and tests/core/test_markdown_rules.py holds
both to that document's examples.
"""

from __future__ import annotations

import html
import re
import unicodedata
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

TELEGRAM_LIMIT = 4096  # counted in UTF-16 code units
DISCORD_LIMIT = 2000  # counted in characters
REPLY_CUT_SEPARATOR = "\n\n"  # between a reply cut at mate.channels.max-reply-chars and the marker


def cut_reply(text: str, limit: int, marker: str) -> str:
    """`text` when it holds at most `limit` characters, else its first ones and `marker` after a
    blank line: no more than `limit` + len(marker) characters in all, whatever the model wrote."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(REPLY_CUT_SEPARATOR))].rstrip() + REPLY_CUT_SEPARATOR + marker


def utf16_len(s: str) -> int:
    """Return the length of ``s`` in UTF-16 code units, the unit Telegram counts limits in."""
    # surrogatepass: a lone surrogate (e.g. from surrogateescape decoding) must not crash us.
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


# --------------------------------------------------------------------------- fences

# Any indentation is accepted because LLMs indent fences inside list items.
_FENCE_OPEN = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(r"[ \t]*(`{3,}|~{3,})\s*")
_NON_SPACE = re.compile(r"\S")


@dataclass(frozen=True, slots=True)
class _Fence:
    """One fenced code block located by character offsets into the source text."""

    start: int  # first char of the opener line
    body: int  # first char after the opener line's newline
    code: int  # first non-whitespace char of the body (``close`` when there is none)
    close: int  # first char of the closer line (len(text) when unclosed)
    end: int  # just past the closer line, excluding its newline (len(text) when unclosed)
    opener: str  # opener line without indentation, e.g. "```python"
    marker: str  # fence run used to close it, e.g. "```"
    closed: bool


def _find_fences(text: str) -> list[_Fence]:
    """Locate fenced code blocks in one linear pass over the lines of ``text``."""
    fences: list[_Fence] = []
    n = len(text)
    i = 0
    open_at: tuple[int, int, str, str] | None = None  # (start, body, opener, marker)
    while i < n:
        j = text.find("\n", i)
        if j < 0:
            j = n
        if open_at is None:
            m = _FENCE_OPEN.fullmatch(text, i, j)
            # A backtick "info string" containing a backtick is inline code (```x```), not a fence.
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                open_at = (i, min(j + 1, n), text[i:j].strip(), m.group(1))
        else:
            m = _FENCE_CLOSE.fullmatch(text, i, j)
            marker = open_at[3]
            if m and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker):
                fences.append(_fence(text, open_at, i, j, closed=True))
                open_at = None
        i = j + 1
    if open_at is not None:
        fences.append(_fence(text, open_at, n, n, closed=False))
    return fences


def _fence(
    text: str, open_at: tuple[int, int, str, str], close: int, end: int, *, closed: bool
) -> _Fence:
    """Build a _Fence from the pending opener and where its closer was found."""
    start, body, opener, marker = open_at
    code = _NON_SPACE.search(text, body, close)
    return _Fence(start, body, code.start() if code else close, close, end, opener, marker, closed)


# --------------------------------------------------------------------------- splitting

_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_LINE = re.compile(r"\n")
_SPACE = re.compile(r"\s+")
_LEADING_SPACE = re.compile(r"\s*")


def _fit(text: str, pos: int, budget: int, length: Callable[[str], int]) -> int:
    """Return the largest ``end`` with ``length(text[pos:end]) <= budget`` (``pos`` if none)."""
    n = len(text)
    if budget <= 0:
        return pos
    hi = min(n, pos + budget)
    if length(text[pos:hi]) <= budget:
        # Fast path for len and utf16_len: one char more than the budget can never fit.
        if hi == n or length(text[pos : hi + 1]) > budget:
            return hi
        # An exotic length (e.g. grapheme counting) grows slower than len, so gallop outwards.
        lo, step = hi, budget
        while True:
            hi = min(n, lo + step)
            if length(text[pos:hi]) > budget:
                break
            if hi == n:
                return n
            lo, step = hi, step * 2
    else:
        lo = pos
    # Invariant: text[pos:lo] fits and text[pos:hi] does not.
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if length(text[pos:mid]) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def _glued(text: str, i: int) -> bool:
    """Whether a hard cut before ``text[i]`` would tear a visible character apart."""
    ch, prev = text[i], text[i - 1]
    return (
        unicodedata.combining(ch) != 0
        or ch in "\u200d\ufe0e\ufe0f"
        or "\U0001f3fb" <= ch <= "\U0001f3ff"  # skin-tone modifiers
        or prev == "\u200d"
    )


def _skip_separator(text: str, cut: int) -> int:
    """Return where the next chunk starts: past the whitespace at ``cut``, keeping indentation."""
    match = _LEADING_SPACE.match(text, cut)
    j = match.end() if match else cut
    if j >= len(text):
        return len(text)
    newline = text.rfind("\n", cut, j)
    # Keep the next line's indentation: it matters inside code and nested lists.
    return newline + 1 if newline >= 0 else j


def split_message(text: str, limit: int, *, length: Callable[[str], int] = len) -> list[str]:
    """Split ``text`` into non-empty chunks with ``length(chunk) <= limit``.

    Boundaries are preferred in the order paragraph, line, whitespace, hard cut. A chunk
    that ends inside a fenced code block gets a closing fence, and the next chunk reopens
    it with the same info string; those added lines count toward ``limit``. ``length``
    must be additive over concatenation (``len`` for Discord, ``utf16_len`` for Telegram).
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    if length(text) <= limit:
        return [text]

    n = len(text)
    fences = _find_fences(text)
    starts = [f.start for f in fences]

    def fence_after_start(p: int) -> _Fence | None:
        # The only fence that can contain p is the last one opening strictly before it.
        k = bisect_left(starts, p) - 1
        return fences[k] if k >= 0 else None

    def cut_state(p: int) -> tuple[int, _Fence | None]:
        """Return (usable cut at or before ``p``, fence the chunk would end inside)."""
        f = fence_after_start(p)
        if f is None or p > f.end or (p == f.end and f.closed):
            return p, None
        # Inside the closer line: end the chunk with the code instead.
        p = min(p, f.close)
        if p <= f.code:
            # The chunk would end on an opener with no code after it; cut before the opener.
            return f.start, None
        return p, f

    def choose_cut(pos: int, end: int, visible: int) -> tuple[int, _Fence | None]:
        """Pick the best boundary in ``text[pos:end]``; its separator may start at ``end``."""
        window_end = min(n, end + 1)
        for pattern in (_PARAGRAPH, _LINE, _SPACE):
            for m in reversed(list(pattern.finditer(text, pos, window_end))):
                cut, inside = cut_state(m.start())
                if cut == m.start() and cut > visible:
                    return cut, inside
                if m.start() <= visible:
                    break  # anything earlier would leave a whitespace-only chunk
        # Hard cut: step back off combining marks and ZWJ sequences where possible.
        cut = end
        while cut - 1 > visible and cut < n and _glued(text, cut):
            cut -= 1
        if cut < n and _glued(text, cut):
            cut = end
        moved, inside = cut_state(cut)
        return (moved, inside) if moved > visible else (cut, None)

    chunks: list[str] = []
    pos = _skip_separator(text, 0)
    while pos < n:
        f = fence_after_start(pos + 1)
        if f is not None and f.start == pos:
            if f.code == f.close:
                # An empty code block at a chunk boundary carries nothing; drop it.
                pos = _skip_separator(text, f.end)
                continue
            # Starting on an opener is handled as a reopen, so the opener line can never be
            # cut off from its code; blank lines before the code are dropped.
            newline = text.rfind("\n", f.body, f.code)
            pos = newline + 1 if newline >= 0 else f.body
        else:
            f = fence_after_start(pos)
        reopen = f if f is not None and f.body <= pos < f.close else None
        prefix = f"{reopen.opener}\n" if reopen else ""
        room = limit - length(prefix)

        first_visible = _NON_SPACE.search(text, pos)
        if first_visible is None:
            break  # only whitespace remains
        visible = first_visible.start()
        # Measuring only a limit-sized window keeps the whole split linear.
        if _fit(text, pos, room, length) >= n:
            chunks.append(prefix + text[pos:].rstrip())
            break

        budget = room
        while True:
            end = _fit(text, pos, budget, length) if budget >= 1 else pos
            if end <= pos:
                # The limit cannot even hold the fence lines: degrade to a plain hard cut.
                prefix, suffix, inside = "", "", None
                cut = _fit(text, pos, limit, length)
                if cut <= pos:
                    raise ValueError(f"limit {limit} cannot hold {text[pos]!r}")
                body = text[pos:cut].rstrip()
                break
            cut, inside = choose_cut(pos, end, visible)
            body = text[pos:cut].rstrip()
            suffix = f"\n{inside.marker}" if inside else ""
            over = length(body) + length(suffix) - room
            if over <= 0:
                break
            # Reserve room for the closing fence and look for a boundary again.
            budget -= max(over, 1)

        if body.strip():
            chunks.append(prefix + body + suffix)
        else:
            # Only indentation fit (absurdly small limit): drop it rather than emit blank chunks.
            cut = visible
        pos = _skip_separator(text, cut)
        if inside is not None and inside.closed and pos == inside.close:
            # Our added closing fence stands in for the original one; don't reopen to close again.
            pos = _skip_separator(text, inside.end)
    return chunks


# --------------------------------------------------------------------------- Telegram HTML

_PLACEHOLDER = re.compile(r"\x00(\d+)\x00")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_BACKSLASH = re.compile(r"\\([\\`*_{}\[\]()#+\-.!~|<>])")
_LINK = re.compile(r"\[([^\[\]\n]+)\]\(\s*([^\s()]+(?:\([^\s()]*\)[^\s()]*)*)\s*\)")
_BARE_URL = re.compile(r"(?i)\b(?:https?|tg)://[^\s<>()\[\]]+")
_SAFE_SCHEME = re.compile(r"(?i)(?:https?|tg|mailto):")
_HEADING = re.compile(r"[ \t]{0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*")
_LANG = re.compile(r"[\w.+#-]+")
_TAG = re.compile(r"<(/?)([a-z]+)[^>]*>")

# Applied in order. ASCII-alnum lookarounds keep x**2 and 2*3*4 literal without breaking
# bold glued to CJK text; \w lookarounds keep snake_case_names literal. Content may not
# contain the delimiter itself, so an unmatched opener fails at the next delimiter instead
# of rescanning the rest of the line (quadratic on lines full of asterisks).
_EMPHASIS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"(?<![A-Za-z0-9*])\*\*\*(?=[^\s*])([^*]+?)(?<=\S)\*\*\*(?![A-Za-z0-9*])"),
        "<b><i>",
        "</i></b>",
    ),
    (
        re.compile(
            r"(?<![A-Za-z0-9*])\*\*(?=[^\s*])((?:[^*]|\*(?!\*))+?)(?<=[^\s*])\*\*(?![A-Za-z0-9*])"
        ),
        "<b>",
        "</b>",
    ),
    (re.compile(r"(?<!~)~~(?=[^\s~])((?:[^~]|~(?!~))+?)(?<=[^\s~])~~(?!~)"), "<s>", "</s>"),
    (
        re.compile(r"(?<![A-Za-z0-9*])\*(?=[^\s*])([^*]+?)(?<=\S)\*(?![A-Za-z0-9*])"),
        "<i>",
        "</i>",
    ),
    (
        re.compile(r"(?<![\w_])_(?=[^\s_])((?:[^_]|(?<=\w)_(?=\w))+?)(?<=[^\s_])_(?![\w_])"),
        "<i>",
        "</i>",
    ),
)


def _balanced(s: str) -> bool:
    """Whether the tags in ``s`` nest properly (all literal '<' are already escaped)."""
    stack: list[str] = []
    for m in _TAG.finditer(s):
        if not m.group(1):
            stack.append(m.group(2))
        elif not stack or stack.pop() != m.group(2):
            return False
    return not stack


def _emphasize(s: str) -> str:
    """Apply emphasis patterns to escaped text, refusing any match that would interleave tags."""
    for pattern, open_tag, close_tag in _EMPHASIS:

        def wrap(m: re.Match[str], o: str = open_tag, c: str = close_tag) -> str:
            inner = m.group(1)
            # Wrapping a balanced span keeps the whole line balanced; otherwise stay literal.
            return f"{o}{inner}{c}" if _balanced(inner) else m.group(0)

        s = pattern.sub(wrap, s)
    return s


def _inline(s: str, frags: list[str]) -> str:
    """Convert one line of inline Markdown to HTML containing placeholders into ``frags``."""

    def hold(fragment: str) -> str:
        # Opaque placeholders keep code, links and URLs out of reach of emphasis and escaping.
        frags.append(fragment)
        return f"\x00{len(frags) - 1}\x00"

    def code(m: re.Match[str]) -> str:
        body = m.group(2)
        if len(body) > 2 and body[0] == body[-1] == " " and body.strip():
            body = body[1:-1]
        return hold(f"<code>{html.escape(body, quote=False)}</code>")

    def link(m: re.Match[str]) -> str:
        label, url = m.group(1), m.group(2)
        if not _SAFE_SCHEME.match(url):
            return m.group(0)  # javascript: and relative links stay literal text
        if any(frags[int(i)].startswith("<") for i in _PLACEHOLDER.findall(url)):
            return m.group(0)  # a code span in the address would put markup inside href="..."
        return hold(f'<a href="{html.escape(url, quote=True)}">{_inline(label, frags)}</a>')

    s = _CODE_SPAN.sub(code, s)
    s = _BACKSLASH.sub(lambda m: hold(html.escape(m.group(1), quote=False)), s)
    s = _LINK.sub(link, s)
    s = _BARE_URL.sub(lambda m: hold(html.escape(m.group(0), quote=False)), s)
    return _emphasize(html.escape(s, quote=False))


def _render_line(line: str, frags: list[str]) -> str:
    """Render one non-code line, turning headings into bold lines."""
    m = _HEADING.fullmatch(line)
    if m is None:
        return _inline(line, frags)
    # "## **Title**" is common LLM output; bold inside a bold line is noise, and dropping
    # whole <b></b> pairs keeps the line balanced.
    title = _inline(m.group(1), frags).replace("<b>", "").replace("</b>", "")
    return f"<b>{title}</b>" if title else ""


def _render_fence(text: str, f: _Fence) -> str:
    """Render one fenced block as <pre>, escaping but never transforming its content."""
    content = text[f.body : f.close]
    if content.endswith("\n"):
        content = content[:-1]
    code = html.escape(content, quote=False)
    info = f.opener[len(f.marker) :].strip().split()
    lang = info[0] if info and _LANG.fullmatch(info[0]) else ""
    if lang:
        return f'<pre><code class="language-{lang}">{code}</code></pre>'
    return f"<pre>{code}</pre>"


def markdown_to_telegram_html(text: str) -> str:
    """Convert common LLM Markdown into Telegram's HTML parse mode, always with balanced tags."""
    # NUL delimits our placeholders and is meaningless in chat text; a CRLF is one line break.
    text = text.replace("\x00", "").replace("\r\n", "\n")
    frags: list[str] = []
    out: list[str] = []

    def lines(segment: str) -> None:
        out.append("\n".join(_render_line(line, frags) for line in segment.split("\n")))

    pos = 0
    for f in _find_fences(text):
        lines(text[pos : f.start])
        out.append(_render_fence(text, f))
        pos = f.end
    lines(text[pos:])

    def expand(m: re.Match[str]) -> str:
        return _PLACEHOLDER.sub(expand, frags[int(m.group(1))])

    return _PLACEHOLDER.sub(expand, "".join(out))
