"""No markup ever reaches a person (SPEC S34): visible_text and the streamed preview, over
thousands of replies mixed from what small models write and what people should read.

Each piece carries a marker word: a markup piece's marker must never show, a prose piece's
must show, in order; the calls must come out in the order they were written. The checks
for markup are written here, apart from the code that takes it out.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from bot.conversation.agent import our_labels
from bot.core.prompts import LOCALES, PromptLibrary
from bot.llm.memory_snapshot import FileChange
from bot.llm.text_tool_calls import Labels, VisiblePreview, read_reply, visible_text

READ, WRITE = "read_workspace_memory_file", "write_workspace_memory_file"
OFFERED = frozenset({READ, WRITE})


@dataclass(frozen=True)
class Piece:
    text: str
    marker: str
    markup: bool
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    imitated: bool = False
    whole_lines: bool = False  # must stand on lines of its own (a fence, a note)
    opens_line: bool = False  # must open a line (the time label)


def write(marker: str) -> dict[str, Any]:
    return {"agentId": 1, "filename": "notes.md", "content": marker}


def call_json(marker: str) -> str:
    return json.dumps({"name": WRITE, "arguments": write(marker)})


def markup_pieces(note: str) -> list[Piece]:
    def called(marker: str, text: str, **kw: Any) -> Piece:
        return Piece(text, marker, True, ((WRITE, write(marker)),), **kw)

    return [
        called("Mbare", call_json("Mbare")),
        called("Mtools", f"<tools>{call_json('Mtools')}</tools>"),
        called("Mtoolcall", f"<tool_call>\n{call_json('Mtoolcall')}\n</tool_call>"),
        called("Mfence", f"```json\n{call_json('Mfence')}\n```", whole_lines=True),
        called("Mfunc", f"<function={WRITE}>{json.dumps(write('Mfunc'))}</function>"),
        called("Mparam", f"<function={WRITE}>\n<parameter=agentId>\n1\n</parameter>\n<parameter=filename>\n"
                         "notes.md\n</parameter>\n<parameter=content>\nMparam\n</parameter>\n</function>"),
        called("Mopenai", json.dumps({"type": "function", "function": {
            "name": WRITE, "arguments": json.dumps(write("Mopenai"))}})),
        Piece(json.dumps({"name": "get_weather", "arguments": {"city": "Munknown"}}), "Munknown", True),
        Piece('<tool_response>\n{"status": "saved", "note": "Mresult"}\n</tool_response>', "Mresult", True,
              imitated=True),
        Piece("<tool_response>Mresulttext was written</tool_response>", "Mresulttext", True, imitated=True),
        Piece('{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Mbareresult"}', "Mbareresult", True,
              imitated=True),
        Piece("</tool_call>", "</tool_call>", True),
        Piece("[2026-12-03 10:46] ", "[2026-12-03 10:46]", True, opens_line=True),
        Piece(note, "Mnote", True, whole_lines=True),
    ]


PROSE = [
    Piece("Pone I like green tea.", "Pone", False),
    Piece("Ptwo see [the docs](https://example.com/x) for more.", "Ptwo", False),
    Piece("Pthree if a < b and c > d then {x} holds.", "Pthree", False),
    Piece("Pfour 你好，我记住了。", "Pfour", False),
    Piece("```python\nPfive = {'name': 'read_workspace_memory_file', 'arguments': {}}\n```", "Pfive", False,
          whole_lines=True),
    Piece("- Psix a list item\n- another item", "Psix", False, whole_lines=True),
    Piece('Pseven the JSON {"name": "Alice", "id": 3} is data.', "Pseven", False),
    Piece("Peight [1, 2, 3] and <b>bold</b>", "Peight", False),
]

TAG = re.compile(r"</?(?:tool_call|tool_calls|tools|tool_response|tool_result|function)\b|<function=", re.I)
TIME_LABEL = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]")
ARGUMENT_KEYS = {"arguments", "input", "parameters", "args"}


def json_markup(text: str) -> list[Any]:
    """Every JSON value in `text`, outside ```python fences, that is a tool call or a tool result."""
    text = re.sub(r"```python\n.*?```", "", text, flags=re.S)
    found = []
    decoder = json.JSONDecoder()
    for index, char in enumerate(text):
        if char not in "{[":
            continue
        try:
            value, _ = decoder.raw_decode(text, index)
        except ValueError:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and (
                ("name" in item and ARGUMENT_KEYS & set(item)) or "function" in item
                or {"tool_use_id", "tool_call_id"} & set(item) or item.get("type") == "tool_result"
            ):
                found.append(item)
    return found


def markup_shown(text: str, header: str) -> list[str]:
    problems = [m.group() for m in TAG.finditer(text)] + [m.group() for m in TIME_LABEL.finditer(text)]
    problems += [header] if header in text else []
    return problems + [json.dumps(value) for value in json_markup(text)]


@dataclass
class Reply:
    text: str
    pieces: list[Piece] = field(default_factory=list)


def compose(rng: random.Random, markup: list[Piece]) -> Reply:
    reply = Reply("")
    for _ in range(rng.randint(1, 6)):
        piece = rng.choice(markup + PROSE)
        previous = reply.pieces[-1] if reply.pieces else None
        if not reply.text:
            gap = ""
        elif piece.whole_lines or piece.opens_line or (previous and previous.whole_lines):
            gap = rng.choice(["\n", "\n\n"])
        elif previous and previous.opens_line:
            gap = ""
        else:
            gap = rng.choice(["", " ", "\n", "\n\n"])
        reply.text += gap + piece.text
        reply.pieces.append(piece)
    return reply


def check(reply: Reply, labels: Labels, header: str) -> str:
    read = read_reply(reply.text, OFFERED, labels)
    markers = [p.marker for p in reply.pieces if p.markup]
    assert not [m for m in markers if m in read.text], reply.text
    assert not markup_shown(read.text, header), reply.text
    at = 0
    for marker in [p.marker for p in reply.pieces if not p.markup]:  # every piece of prose, in order
        at = read.text.find(marker, at)
        assert at >= 0, (reply.text, read.text)
        at += len(marker)
    assert list(read.calls) == [c for p in reply.pieces for c in p.calls], reply.text
    assert read.imitated == any(p.imitated for p in reply.pieces), reply.text
    return read.text


@dataclass(frozen=True)
class Ours:
    labels: Labels
    header: str  # the memory note's first line
    note: str  # a whole note, as the model read it


@pytest.fixture(params=LOCALES)
def ours(request: pytest.FixtureRequest) -> Ours:
    prompts = PromptLibrary(request.param)
    note = prompts.render("agent/memory-updated", changes=[
        FileChange("PROFILE.md", ("- Mnote likes tea",), ("- Mnote old line",))])
    return Ours(our_labels(prompts), prompts.render("agent/memory-updated", changes=[]).strip(), note)


def test_every_mix_of_markup_and_prose_shows_only_the_prose(ours: Ours) -> None:
    rng = random.Random(34)
    markup = markup_pieces(ours.note)
    for _ in range(1500):
        check(compose(rng, markup), ours.labels, ours.header)


def test_each_form_alone_and_beside_prose(ours: Ours) -> None:
    our, header = ours.labels, ours.header
    for piece in markup_pieces(ours.note):
        gap = "\n" if piece.whole_lines else ""
        before = "\n" if piece.whole_lines or piece.opens_line else " "
        for reply in (Reply(piece.text, [piece]),
                      Reply(f"{PROSE[0].text}{before}{piece.text}", [PROSE[0], piece]),
                      Reply(f"{piece.text}{gap}{PROSE[3].text}", [piece, PROSE[3]])):
            check(reply, our, header)


def test_the_stream_never_shows_what_the_reply_does_not(ours: Ours) -> None:
    our, header = ours.labels, ours.header
    rng = random.Random(3434)
    markup = markup_pieces(ours.note)
    for _ in range(400):
        reply = compose(rng, markup)
        visible = check(reply, our, header)
        heard: list[str] = []
        preview = VisiblePreview(heard.append, OFFERED, our)
        at = 0
        while at < len(reply.text):
            step = rng.randint(1, 12)
            preview.text(reply.text[at:at + step])
            at += step
            shown = "".join(heard)
            assert not [p.marker for p in reply.pieces if p.markup and p.marker in shown], (reply.text, shown)
            assert not markup_shown(shown, header), (reply.text, shown)
        preview.end(visible)
        shown = "".join(heard)
        assert shown == preview.shown == visible, (reply.text, shown)


def test_plain_prose_streams_as_it_comes() -> None:
    heard: list[str] = []
    preview = VisiblePreview(heard.append, OFFERED)
    for word in ["Hello ", "there, ", "how ", "are ", "you?"]:
        preview.text(word)
    assert heard == ["Hello", " there,", " how", " are", " you?"]  # a space goes on with what follows it


def test_a_reply_without_tools_offered_still_loses_its_markup() -> None:
    text = f"<tool_call>{call_json('M')}</tool_call>\nHello"
    assert visible_text(text) == "Hello"


@pytest.mark.parametrize("text", [
    f"{call_json('M')}\n```",  # a call, then the fence it was meant to sit in (the real lane's reply: "```")
    f"```json\n{call_json('M')}\n```\n```",
    "```",
    "```json\n\n```",
])
def test_no_stray_or_empty_fence_is_left_where_a_call_was(text: str) -> None:
    assert visible_text(text, OFFERED) == ""


def test_a_code_block_beside_a_call_stays_whole() -> None:
    text = f"{call_json('M')}\nDone. Example:\n```python\nx = 1\n```"
    assert visible_text(text, OFFERED) == "Done. Example:\n```python\nx = 1\n```"
