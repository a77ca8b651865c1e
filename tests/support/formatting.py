"""Checks of rendered chat text: HTML tags balanced, and the tricky Markdown inputs every renderer is tried on."""

from __future__ import annotations

import re




TAG = re.compile(r"<(/?)([a-z]+)(?:\s[^<>]*)?>")


def assert_balanced(out: str) -> None:
    stack: list[str] = []
    for m in TAG.finditer(out):
        if m.group(1):
            assert stack and stack.pop() == m.group(2), out
        else:
            stack.append(m.group(2))
    assert not stack, out
    # Every remaining angle bracket must have been escaped.
    assert "<" not in TAG.sub("", out) and ">" not in TAG.sub("", out), out


TRICKY = [
    "**unclosed bold",
    "*unclosed italic",
    "**bold *nested italic* still bold**",
    "**a *b** c*",
    "*a **b* c**",
    "_a **b_ c**",
    "***x**",
    "**x***",
    "****",
    "** spaced **",
    "2*3*4 and 5*6",
    "x**2 + y**2",
    "snake_case_names and _real italic_ and __dunder__",
    "`unclosed code **bold**",
    "``` not a fence ``` **x**",
    "```python\nunclosed fence <tag> **x**",
    "[unclosed link](https://x.y",
    "[a](https://x.y) **[b](https://z.w)**",
    "[**a](https://x.y) b**",
    "~~a **b~~ c**",
    "<script>alert('x')</script> & &amp;",
    "# heading with *unclosed",
    "## **bold heading** trailing *",
    "line1 **bold\nline2** end",
    "a\x00b **c** \x000\x00",
    "\\",
    "*" * 50,
    "_" * 50,
    "`" * 7,
]
