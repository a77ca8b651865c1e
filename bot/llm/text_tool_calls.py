"""Tool calls that a model wrote as text: read them out of a reply, run them as tool calls, and
keep the rest of the reply free of markup (SPEC S21 local models, S34).

Small local models (Qwen 1.5B under llama.cpp, for one) rarely emit a native tool_use block:
they write the call as text, in every shape their training saw — a bare `{"name": ...,
"arguments": {...}}`, a ```json fence, `<tool_call>` or `<tools>` tags, `<function=name>`,
several calls in one reply, a call with prose beside it — and at times imitate a tool's
answer (`<tool_response>...`). `read_reply` finds the calls (only tools the request offered)
and what is left for a person; TextToolCallClient turns the calls into the tool_use blocks
the model meant, so the agent runs them and the history replays them as real tool calls.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from bot.core.content.messages import TIME_LABEL
from bot.llm.port import LLMClient, LLMRequest, LLMResponse, TextListener, ToolCall

WrittenCall = tuple[str, dict[str, Any]]

_ARGUMENT_KEYS = ("arguments", "input", "parameters", "args")
_CALL_KEYS = frozenset({"name", "type", "id", *_ARGUMENT_KEYS})
_CALL_TYPES = frozenset({"function", "tool_use", "tool_call", "function_call"})
_RESULT_TYPES = frozenset({"tool_result", "tool_response", "function_call_output", "function_result"})
_RESULT_VALUES = frozenset({"content", "result", "output", "response", "status", "error"})
_RESULT_KEYS = frozenset({"name", "type", "id", "is_error", *_RESULT_VALUES})
_CALL_TAG_NAMES = ("tool_calls", "tool_call", "tools", "tool", "function_calls", "function_call", "functions")
_RESULT_TAG_NAMES = ("tool_response", "tool_result", "tool_output", "function_response", "function_result")
_OPEN_TAG = re.compile(
    rf"<(?P<name>{'|'.join(_RESULT_TAG_NAMES + _CALL_TAG_NAMES)})\s*>|<function=(?P<fn>[^<>\s]+)\s*>", re.I)
# Left-overs that are never meant for a person: closing tags without their opening, and the
# special tokens of chat templates that a server let through.
_STRAY = re.compile(
    rf"</(?:{'|'.join(_RESULT_TAG_NAMES + _CALL_TAG_NAMES)}|function|parameter)\s*>|<\|[a-z_]+\|>|\[TOOL_CALLS\]",
    re.I)
_PARAMETER = re.compile(r"<parameter=([^<>\s]+)\s*>(.*?)(?:</parameter\s*>|(?=<parameter=)|$)", re.S | re.I)
_SPECIAL = re.compile(r"```|[<{\[]")
# A fence whose body is looked through for calls; any other (```python) is an answer, kept as written.
_MARKUP_FENCES = frozenset({"", "json", "json5", "jsonc", "tool_call", "tool_calls", "tools", "xml"})
# The start of an object cut off at the end of a reply that can only have been a call.
_CUT_CALL = re.compile(r'\{\s*"(?:name|function|tool_calls|tool_call_id|tool_use_id|arguments)"\s*:')
_CUT = "\x00"  # where markup was taken out (model text holds no NUL: they are dropped first)
_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class Labels:
    """The labels our own prompts put around what the model reads, so that an echo of them
    can be taken out of its reply: `headers` match a whole line (the "memory updated" note's
    first line), `follow` the lines that belong to such a header (the note's changes)."""

    headers: tuple[str, ...] = ()
    follow: tuple[re.Pattern[str], ...] = ()


NO_LABELS = Labels()
# The time label the user's message starts with (with_time), anywhere it opens a line.
_TIME_LABEL = re.compile(r"(?m)^[ \t]*(?:" + TIME_LABEL.pattern.removeprefix("^") + r"[ \t]*)+")


@dataclass(frozen=True, slots=True)
class ReadReply:
    """A model's reply as read: the calls it wrote (in order), the text a person may see,
    and whether it imitated a tool result."""

    text: str
    calls: tuple[WrittenCall, ...] = ()
    imitated: bool = False


@dataclass(slots=True)
class _Found:
    calls: list[WrittenCall] = field(default_factory=list)
    imitated: bool = False
    cut: bool = False  # markup was taken out somewhere


def read_reply(text: str, offered: Collection[str], labels: Labels = NO_LABELS, *, markup: bool = True) -> ReadReply:
    """The calls written in `text` to tools in `offered`, and the text beside them with tool
    markup (tags, JSON calls and results, also of tools not offered) and our labels taken out.

    `markup=False` takes out the labels only (text tool calls are not parsed)."""
    found = _Found()
    text = text.replace(_CUT, "")
    kept = _scan(text, offered, found, final=True) if markup else text
    visible = _without_labels(kept, labels)
    if found.cut:
        visible = _without_stray_fences(visible)
    shown = _tidy(visible) if found.cut or visible is not kept else visible.strip()
    return ReadReply("" if _ONLY_FENCES.fullmatch(shown) else shown, tuple(found.calls), found.imitated)


def visible_text(text: str, offered: Collection[str] = (), labels: Labels = NO_LABELS, *, markup: bool = True) -> str:
    """What a person may see of `text`: no tool tags, no JSON tool call or result, none of our labels."""
    return read_reply(text, offered, labels, markup=markup).text


def text_tool_call(text: str, offered: Collection[str]) -> WrittenCall | None:
    """(name, input) when `text` as a whole is one tool call naming an offered tool."""
    read = read_reply(text, offered)
    if len(read.calls) != 1 or read.text or read.imitated:
        return None
    return read.calls[0]


# What a step of the scan did with the piece at its position: (where the scan goes on, the
# text kept for the piece: the piece itself, "" when it was markup, or a rewritten fence);
# None: undecided until more of a reply being written comes.
_Step = tuple[int, str] | None


def _scan(text: str, offered: Collection[str], found: _Found, *, final: bool) -> str:
    """`text` with its markup cut out (calls gathered in `found`); `final=False` (a reply still
    being written) stops before the first piece that may yet turn out to be markup."""
    out: list[str] = []
    pos = 0
    while (match := _SPECIAL.search(text, pos)) is not None:
        start = match.start()
        out.append(text[pos:start])
        if match.group() == "```":
            step = _fence(text, start, offered, found, final=final)
        elif text[start] == "<":
            step = _tag(text, start, offered, found, final=final)
        else:
            step = _json(text, start, offered, found, final=final)
        if step is None:
            return "".join(out)
        pos, kept = step
        if kept != text[start:pos]:
            found.cut = True
        out.append(kept or _CUT)
    out.append(text[pos:])
    return "".join(out)


def _fence(text: str, start: int, offered: Collection[str], found: _Found, *, final: bool) -> _Step:
    info_end = text.find("\n", start + 3)
    if info_end < 0:
        return None if not final else (len(text), text[start:])
    close = text.find("```", info_end + 1)
    end = len(text) if close < 0 else close + 3
    if text[start + 3:info_end].strip().lower() not in _MARKUP_FENCES:
        return end, text[start:end]  # code: the answer itself, kept as written
    if close < 0 and not final:
        return None
    inner = _Found()
    body = _scan(text[info_end + 1:close if close >= 0 else len(text)], offered, inner, final=True)
    found.calls += inner.calls
    found.imitated |= inner.imitated
    if not inner.cut:
        return end, text[start:end]
    if body.replace(_CUT, "").strip():  # more than markup in it: the rest stays in its fence
        return end, text[start:info_end + 1] + _tidy(body) + ("\n```" if close >= 0 else "")
    return end, ""


def _tag(text: str, start: int, offered: Collection[str], found: _Found, *, final: bool) -> _Step:
    opening = _OPEN_TAG.match(text, start)
    if opening is None:
        stray = _STRAY.match(text, start)
        if stray is not None:
            return stray.end(), ""
        if not final and _MAYBE_TAG.fullmatch(text, start):
            return None  # `<tool_ca` may still become a tag
        return start + 1, "<"
    function = opening.group("fn")
    name = (opening.group("name") or "function").lower()
    closing = re.compile(rf"</{'function' if function else re.escape(name)}\s*>", re.I).search(text, opening.end())
    if closing is not None:
        body, end = text[opening.end():closing.start()], closing.end()
    elif not final:
        return None
    else:  # unclosed (the end cut off): it holds what directly follows, if that is JSON or a fence
        body, end = _unclosed_body(text, opening.end())
    if function:
        arguments = _function_arguments(body)
        if function in offered and arguments is not None:
            found.calls.append((function, arguments))
        return end, ""
    before = len(found.calls)
    _scan(body, offered, found, final=True)  # what a tag holds is never for a person
    if name in _RESULT_TAG_NAMES and len(found.calls) == before:
        found.imitated = True
    return end, ""


_FUNCTION_CLOSE = re.compile(r"</function\s*>", re.I)
_MAYBE_TAG = re.compile(r"</?(?:[A-Za-z_]+(?:=[^<>\s]*)?|\|[a-z_]*\|?)?")


def _unclosed_body(text: str, at: int) -> tuple[str, int]:
    begin = at + len(text[at:]) - len(text[at:].lstrip())
    if text.startswith("```", begin):
        close = text.find("```", begin + 3)
        end = len(text) if close < 0 else close + 3
        return text[at:end], end
    if text.startswith(("{", "["), begin):
        try:
            _, end = _DECODER.raw_decode(text, begin)
        except (ValueError, RecursionError):
            return "", at
        return text[at:end], end
    if text.startswith("<function=", begin):
        found = _FUNCTION_CLOSE.search(text, begin)
        end = len(text) if found is None else found.end()
        return text[at:end], end
    return "", at


def _function_arguments(body: str) -> dict[str, Any] | None:
    """The arguments of `<function=name>...</function>`: a JSON object, or `<parameter=key>` lines."""
    body = body.strip()
    if body.startswith("{"):
        try:
            value, _ = _DECODER.raw_decode(body)
        except (ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None
    arguments: dict[str, Any] = {}
    for key, raw in _PARAMETER.findall(body):
        value = raw.strip()
        arguments[key] = value
        if value[:1] in _JSON_STARTS or value in ("true", "false", "null"):
            try:  # numbers, booleans and objects as JSON; anything else is the text itself
                arguments[key] = json.loads(value)
            except ValueError:
                pass
    return arguments if arguments or not body else None


_JSON_STARTS = frozenset("{[-0123456789")


def _json(text: str, start: int, offered: Collection[str], found: _Found, *, final: bool) -> _Step:
    if text.startswith("[TOOL_CALLS]", start):
        return start + len("[TOOL_CALLS]"), ""
    try:
        value, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        if _open_to_the_end(text, start):
            if not final:
                return None
            if _CUT_CALL.match(text, start):  # a call cut off by the output limit: never shown
                return len(text), ""
        return start + 1, text[start]
    if _markup(value, offered, found):
        return end, ""
    return end, text[start:end]  # plain JSON in an answer: kept whole, nothing inside it looked at


def _open_to_the_end(text: str, start: int) -> bool:
    """Whether the bracket at `start` is still open where the text ends (JSON being written, or cut off)."""
    depth = 0
    quoted = escaped = False
    for char in text[start:]:
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth <= 0:
                return False
    return True


def _markup(value: Any, offered: Collection[str], found: _Found) -> bool:
    """Whether a JSON value is a tool call (gathered when it may run) or a tool result (imitated)."""
    if isinstance(value, list):  # several calls at once; each must spell out its arguments
        shaped = [_call(item, offered, strict=True) for item in value]
        if not shaped or any(not is_call for is_call, _ in shaped):
            return False
        found.calls += [call for _, call in shaped if call is not None]
        return True
    if not isinstance(value, dict):
        return False
    listed = value.get("tool_calls")
    if isinstance(listed, list) and set(value) <= {"tool_calls", "role", "content", "type"}:
        return _markup(listed, offered, found) or not listed
    is_call, call = _call(value, offered, strict=False)
    if is_call:
        if call is not None:
            found.calls.append(call)
        return True
    if _is_result(value, offered):
        found.imitated = True
        return True
    return False


def _call(value: Any, offered: Collection[str], *, strict: bool) -> tuple[bool, WrittenCall | None]:
    """(shaped like a call, the call when it may run: a tool offered, its input an object).

    `strict`: the arguments must be written out."""
    if not isinstance(value, dict):
        return False, None
    inner = value.get("function")
    if isinstance(inner, dict) and set(value) <= {"function", "type", "id", "index"}:
        value, strict = inner, False  # the OpenAI shape: {"type": "function", "function": {...}}
    name = value.get("name")
    if not isinstance(name, str) or not set(value) <= _CALL_KEYS:
        return False, None
    if value.get("type", "function") not in _CALL_TYPES:
        return False, None
    written = [key for key in _ARGUMENT_KEYS if key in value]
    if not written and (strict or name not in offered):
        return False, None  # {"name": "Alice", "id": 3} is data, not a call
    if name not in offered:
        return True, None  # never run a tool that was not offered, whatever the text says
    arguments: Any = value[written[0]] if written else {}
    if isinstance(arguments, str):  # the OpenAI habit: arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return True, None
    return True, (name, arguments) if isinstance(arguments, dict) else None


def _is_result(value: dict[str, Any], offered: Collection[str]) -> bool:
    if "tool_use_id" in value or "tool_call_id" in value:
        return True
    if value.get("type") in _RESULT_TYPES or value.get("role") in ("tool", "ipython"):
        return True
    name = value.get("name")
    return (isinstance(name, str) and name in offered and bool(set(value) & _RESULT_VALUES)
            and set(value) <= _RESULT_KEYS)


def _without_labels(text: str, labels: Labels) -> str:
    """`text` without our labels: the time label that opens a line, a note's lines."""
    if "[" not in text:
        return text
    if _TIME_LABEL.search(text):
        text = _TIME_LABEL.sub(_CUT, text)
    if not any(header in text for header in labels.headers):
        return text
    kept: list[str] = []
    in_note = False
    for line in text.split("\n"):
        bare = line.replace(_CUT, "")
        if bare.strip() in labels.headers:
            in_note = True
            kept.append(_CUT)
        elif in_note and bare.strip() and any(p.fullmatch(bare) for p in labels.follow):
            kept.append(_CUT)
        else:
            in_note = False
            kept.append(line)
    return "\n".join(kept)


_CUT_LINE = re.compile(rf"^[ \t]*{_CUT}[{_CUT} \t]*\n", re.M)
_CUT_SPACE = re.compile(rf"[ \t]*{_CUT}[{_CUT} \t]*")
_LINE_END_SPACE = re.compile(r"[ \t]+$", re.M)
_BLANK_LINES = re.compile(r"\n[ \t]*(?:\n[ \t]*){2,}")


_FENCE_LINE = re.compile(r"^[ \t]*```[\w+-]*[ \t]*$", re.M)
_EMPTY_FENCE = re.compile(r"^[ \t]*```[\w+-]*[ \t]*\n(?:[ \t]*\n)*[ \t]*```[ \t]*$", re.M)
_ONLY_FENCES = re.compile(r"(?:\s*```[\w+-]*)*\s*")


def _without_stray_fences(text: str) -> str:
    """What cutting a fenced call out can leave: an empty fence, or one fence line without its
    partner at either end of the reply."""
    text = _EMPTY_FENCE.sub(_CUT, text)
    fences = list(_FENCE_LINE.finditer(text))
    if len(fences) % 2:
        first, last = fences[0], fences[-1]
        if not text[last.end():].replace(_CUT, "").strip():
            stray = last
        elif not text[:first.start()].replace(_CUT, "").strip():
            stray = first
        else:
            return text
        text = text[:stray.start()] + _CUT + text[stray.end():]
    return text


def _tidy(text: str) -> str:
    """The text around what was taken out: one space where a piece inside a line went, none at
    a line's ends, no blank lines piling up, nothing at either end."""
    def space(match: re.Match[str]) -> str:
        before = text[match.start() - 1] if match.start() else "\n"
        after = text[match.end()] if match.end() < len(text) else "\n"
        return "" if "\n" in (before, after) else " "

    text = _CUT_LINE.sub("", text)  # a line that was all markup goes with its line break
    text = _CUT_SPACE.sub(space, text)
    return _BLANK_LINES.sub("\n\n", _LINE_END_SPACE.sub("", text)).strip()


class VisiblePreview:
    """Passes a streamed reply on as a person may see it: what may still turn out to be
    markup or a label is held back until it is known, and what is known to be is never shown.

    `shown` is what the listener was given so far."""

    def __init__(self, listener: TextListener, offered: Collection[str], labels: Labels = NO_LABELS, *,
                 markup: bool = True) -> None:
        self._listener = listener
        self._offered = offered
        self._labels = labels
        self._markup = markup
        self._raw = ""
        self._plain = True  # nothing seen yet that could start markup or a label
        self.shown = ""

    def text(self, delta: str) -> None:
        self._raw += delta
        self._plain = self._plain and not _MAY_OPEN.search(delta)
        # Space at the end waits for what follows: where markup follows, it goes too.
        self.end(self._raw.strip() if self._plain else self._seen())

    def end(self, text: str) -> None:
        """The reply reads `text` (so far, or complete): what of it was not shown yet goes on."""
        if len(text) > len(self.shown) and text.startswith(self.shown):
            piece, self.shown = text[len(self.shown):], text
            self._listener(piece)

    def _seen(self) -> str:
        raw = _settled_lines(self._raw.replace(_CUT, ""))
        found = _Found()
        kept = _scan(raw, self._offered, found, final=False) if self._markup else raw
        visible = _without_labels(kept, self._labels)
        return _tidy(visible) if found.cut or visible is not kept else visible.strip()


_MAY_OPEN = re.compile(rf"[<{{\[`{_CUT}]")  # what markup and labels start with
_MAYBE_NAME = re.compile(r"[A-Za-z0-9_./-]*")


def _settled_lines(raw: str) -> str:
    """`raw` less its last line while that line may still become a label or markup (a note's
    lines are indented or a file name; labels and markup open with a bracket or a fence)."""
    cut = raw.rfind("\n") + 1
    last = raw[cut:]
    body = last.lstrip()
    if not body or body[0] in "[<{`" or last[:1] in (" ", "\t") or _MAYBE_NAME.fullmatch(body):
        return raw[:cut]
    return raw


class TextToolCallClient:
    """Wraps an LLMClient; only requests that offer tools the model may call are looked at."""

    def __init__(self, inner: LLMClient) -> None:
        self._inner = inner

    async def complete(self, request: LLMRequest, on_text: TextListener | None = None) -> LLMResponse:
        # The stream passes through: the agent shows it through a VisiblePreview.
        response = await self._inner.complete(request, on_text)
        if not request.tools or request.tool_choice == "none" or response.tool_calls:
            return response
        read = read_reply(response.text, {str(tool.get("name")) for tool in request.tools})
        if not read.calls:
            return response
        # Unique for good: a conversation's history must never hold one tool_use id twice.
        calls = tuple(ToolCall(id=f"toolu_text_{uuid.uuid4().hex[:24]}", name=name, input=arguments)
                      for name, arguments in read.calls)
        content: list[dict[str, Any]] = [{"type": "text", "text": read.text}] if read.text else []
        content += [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.input} for call in calls]
        return LLMResponse(
            text=read.text, content=content, tool_calls=calls, stop_reason="tool_use",
            input_tokens=response.input_tokens, output_tokens=response.output_tokens, model=response.model,
            cache_creation_input_tokens=response.cache_creation_input_tokens,
            cache_read_input_tokens=response.cache_read_input_tokens,
        )
