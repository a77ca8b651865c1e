"""Sixty simulated days of memory extraction and nightly emergence against a scripted memory model.

What: whether automatic memory survives months of use (SPEC S19, S24): extraction runs that
fail, daily-note bullets recorded twice, PROFILE.md / MEMORY.md against their budgets, and
whether the extraction request stays bounded (its mean size in the last simulated week over
the first) once the install is in use, not while PROFILE.md / MEMORY.md fill up from empty.

How: a real SQLite database in a temp dir and the services built as the daemon builds them
(`open_core`, then MemorySummarizationService and MemoryEmergenceService over the same
repositories and workspace), with a simulated clock and an in-process scripted memory model
instead of the network. One web conversation gets `--messages-per-day` messages a day
(user and assistant alternating, stored through the message repository); after every
`--batch` messages `analyze_and_update_memory` runs with the clock at that moment of the
day, and every night at 02:00 `emerge` runs. About half the user messages carry a fact (a
unique sentence: a preference for PROFILE.md, a project detail for MEMORY.md, or a one-off
for the daily note only). The first `--warmup-days` simulated days (30 by default: a brand-new install whose
files fill up from the seed, so that the measured weeks start from a month of history) run
the same way, same model, same code path, before the
`--days` measured days; the metrics below count the measured days only.

The scripted model plays a well-behaved real one, so that every failure it sees comes from
the code under test: it reads the current files from the prompt (<profile>, <memory>) and
the new user lines from <transcript>, and answers the JSON of S6 with one daily bullet per
new fact, and one dated line per new durable fact for PROFILE.md / MEMORY.md. While a file
is small it sends the full replacement (old text + new lines); once it is large (30 % of its
budget) every other reply uses the S19 edits form instead (`memory_edits` / `profile_edits`:
appends, now and then an `old`/`new` update of an exact line, with `memory_update: ""`).
Near its budget (85 %) it condenses, dropping the oldest bullets to 65 % (in the edits form
as `{"old": "<line>\n", "new": ""}` deletions). Emergence answers `memory_content`, MEMORY.md
condensed to 60 % of its budget, once the file passes 70 %. Like the real API it obeys
`max_tokens`: the reply's tokens are estimated (CJK character ~1 token, other text ~4
characters per token) and a longer reply is cut there with `stop_reason="max_tokens"`. A
follow-up turn after a cut-off answer (the answer sent back is not JSON, or the follow-up
says "cut off" / "截断") is answered in the edits form; any other follow-up (over budget:
"shorter, please") with a harder condensation (50 %). Seeded: runs are repeatable.

Counted, over the measured days: `failures` (per extraction, the larger of its failed
`summarize` rows in mate_memory_run and 1 if its outcome failed), `duplicates` (daily-note
bullets that occur more than once across all daily notes, each repeat counted on the day of
the note it is in; every planted fact is unique), `max_budget_ratio` (largest size / budget
of PROFILE.md and MEMORY.md, read after every extraction and every emergence),
`request_growth` (mean characters of the extraction requests, system + messages, follow-ups
included, in the last measured week over the first measured week). Extras: the same in
tokens, the same without the two files (`request_growth_besides_files`), the same with the
warm-up included (`request_growth_from_empty`: the first warm-up week as the first week, so
the files filling up from empty), how many planted facts reached a daily note, and the
warm-up's own `warmup_failures` / `warmup_duplicates` / `warmup_max_budget_ratio`, so that
nothing the warm-up saw is hidden.

Targets (SPEC S24): failures 0, duplicates 0, max_budget_ratio <= 1, request_growth <= 1.5.

Run: `python -m bench.memory_soak [--days 60] [--warmup-days 30] [--messages-per-day 40]
[--locale en|zh-CN]`; one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/memory_soak.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import HostLoad, emit, make_config, quiet_logs, sentence
from bot.app import Core, open_core
from bot.llm import LLMRequest, LLMResponse
from bot.retry import MEMORY_MODEL_CALL
from memory.emergence import MemoryEmergenceService
from memory.summarization import RUN_KIND, MemorySummarizationService
from memory.workspace import DAILY_PREFIX, MEMORY_FILE, PROFILE_FILE

AGENT_ID = 1
CONVERSATION = "web:soak"
START = datetime(2026, 1, 5, tzinfo=timezone.utc)  # a Monday, the first warm-up day; the config's zone is UTC
FIRST_BATCH_HOUR = 8.0
LAST_BATCH_HOUR = 22.0
EMERGENCE_HOUR = 2.0  # the seeded emergence-cron "0 2 * * *", on the night after each day
FACT_SHARE = 0.5  # of user messages
FACT_KINDS = (("profile", 0.15), ("memory", 0.45), ("daily", 0.40))
# The scripted model's sense of size, as shares of a file's budget.
LARGE_SHARE = 0.30  # from here on it may answer with edits instead of the whole file
CONDENSE_AT = 0.85  # an update that would pass this makes it drop the oldest bullets ...
CONDENSE_TO = 0.65  # ... down to this
SHORTEN_TO = 0.50  # asked again for a shorter version
EMERGE_AT = 0.70  # emergence rewrites MEMORY.md only once it is this full ...
EMERGE_TO = 0.60  # ... and condenses it to this
EDITS_SHARE = 0.5  # of the replies about a large file
NO_WAITS = replace(MEMORY_MODEL_CALL, base=0.0, maximum=0.0)  # the daemon's retries, without waiting
UPDATE_EDIT_SHARE = 0.3  # of edits replies that also update one existing line
WEEK = 7

_CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef]")
_PLACEHOLDER = re.compile(r"^_.*_$")
_NOTE_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})\.md$")
_EMPTY = ("(empty)", "（空）")


# -- tokens as the real API counts them (roughly) ---------------------------------------


def char_tokens(ch: str) -> float:
    """A CJK character is about one token; other text about four characters per token."""
    return 1.0 if _CJK.match(ch) else 0.25


def estimate_tokens(text: str) -> int:
    return math.ceil(sum(char_tokens(ch) for ch in text))


def cut_to_tokens(text: str, max_tokens: int) -> tuple[str, bool]:
    """`text` cut where it passes `max_tokens`, as the API cuts a reply; (text, was_cut)."""
    used = 0.0
    for index, ch in enumerate(text):
        used += char_tokens(ch)
        if used > max_tokens:
            return text[:index], True
    return text, False


# -- the simulated clock and the planted facts -------------------------------------------


@dataclass(slots=True)
class SimClock:
    """The services' clock: a moment the bench moves forward itself."""

    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def at(self, day: int, hour: float) -> None:
        self.now = START + timedelta(days=day, hours=hour)

    @property
    def day(self) -> int:
        return (self.now - START).days


@dataclass(frozen=True, slots=True)
class Fact:
    text: str
    kind: str  # profile | memory | daily: where a careful model would keep it
    day: int  # the simulated day it was planted on, counted from START


_EN_SLOTS: dict[str, tuple[str, ...]] = {
    "name": ("Anna", "Ben", "Clara", "David", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemal",
             "Lena", "Mateo", "Nora", "Oskar", "Priya", "Quinn", "Rosa", "Sven", "Tara"),
    "relation": ("sister", "brother", "cousin", "aunt", "uncle", "best friend", "colleague", "neighbour"),
    "city": ("Lisbon", "Berlin", "Osaka", "Toronto", "Porto", "Vienna", "Krakow", "Seoul", "Lyon", "Oslo",
             "Valencia", "Ghent"),
    "drink": ("green tea", "black coffee", "oat latte", "mint tea", "espresso", "chai", "hot chocolate"),
    "skill": ("Spanish", "the cello", "pottery", "bouldering", "Rust", "sketching", "chess", "salsa"),
    "weekday": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"),
    "project": ("garden shed", "tax return", "photo archive", "home server", "thesis", "podcast",
                "kitchen remodel", "budget app", "wedding speech", "cycling club site"),
    "tool": ("PostgreSQL", "SQLite", "Hugo", "Django", "a Raspberry Pi", "Figma", "Notion", "Obsidian"),
    "component": ("backend", "backups", "front page", "schedule", "sign-up form", "invoices"),
    "doc": ("draft", "slides", "contract", "quote", "photos", "checklist", "floor plan"),
    "document": ("passport", "driving licence", "gym membership", "car insurance", "library card"),
    "food": ("ramen", "falafel", "pho", "a burrito", "dumplings", "paella", "a salad"),
    "place": ("the market hall", "the canteen", "the corner cafe", "the park", "the station"),
}
_EN_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("profile", "My {relation} {name} lives in {city} now."),
    ("profile", "I prefer {drink} in the morning since {date}."),
    ("profile", "I started learning {skill} on {weekday}s with {name}."),
    ("memory", "The {project} deadline moved to {date}."),
    ("memory", "We decided to use {tool} for the {project} {component}."),
    ("memory", "I promised {name} to send the {project} {doc} by {date}."),
    ("memory", "Remind me to renew my {document} before {date}."),
    ("memory", "The {project} budget is now {amount} euros."),
    ("daily", "Today I had {food} for lunch with {name} at {place}."),
    ("daily", "The train to {city} was {minutes} minutes late this morning."),
)
_ZH_SLOTS: dict[str, tuple[str, ...]] = {
    "name": ("小王", "小李", "阿明", "晓红", "志强", "丽丽", "海峰", "佳怡", "建国", "美玲", "子涵", "浩然",
             "雨桐", "思远", "嘉欣", "俊杰"),
    "relation": ("姐姐", "哥哥", "表妹", "舅舅", "姑姑", "好朋友", "同事", "邻居"),
    "city": ("成都", "杭州", "大连", "西安", "厦门", "昆明", "青岛", "苏州", "长沙", "重庆", "南京", "武汉"),
    "drink": ("绿茶", "美式咖啡", "燕麦拿铁", "乌龙茶", "豆浆", "普洱茶", "热可可"),
    "skill": ("西班牙语", "大提琴", "陶艺", "攀岩", "书法", "围棋", "游泳", "素描"),
    "weekday": ("一", "二", "三", "四", "五", "六"),
    "project": ("阳台花园", "个税申报", "照片整理", "家庭服务器", "毕业论文", "播客", "厨房装修", "记账小程序",
                "婚礼致辞", "骑行俱乐部网站"),
    "tool": ("PostgreSQL", "SQLite", "树莓派", "Django", "飞书文档", "Notion", "Obsidian", "石墨文档"),
    "component": ("后端", "备份", "首页", "日程表", "报名表", "发票"),
    "doc": ("初稿", "幻灯片", "合同", "报价单", "照片", "清单", "平面图"),
    "document": ("护照", "驾照", "健身卡", "车险", "借书证"),
    "food": ("拉面", "饺子", "米线", "麻辣烫", "小笼包", "煲仔饭", "沙拉"),
    "place": ("菜市场旁边的小馆", "公司食堂", "街角咖啡馆", "公园", "火车站"),
    # A Chinese sentence says in ~20 characters what English says in ~55: a clause of context
    # keeps the files growing toward their budgets at a comparable pace.
    "detail": ("这件事下个月之前一定要定下来", "到时候再跟家里人一起商量具体细节", "因为之前那个方案实在太麻烦了",
               "这样周末就能空出时间陪家人", "具体的安排等下周开会时再确认", "这是上次大家讨论之后的结论",
               "如果有变化我会再告诉你", "这个已经跟对方确认过两次了"),
}
_ZH_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("profile", "我{relation}{name}现在住在{city}，{detail}。"),
    ("profile", "从{date}起我早上更喜欢喝{drink}，{detail}。"),
    ("profile", "我开始每周{weekday}跟{name}一起学{skill}了，{detail}。"),
    ("memory", "{project}的截止日期改到了{date}，{detail}。"),
    ("memory", "我们决定{project}的{component}用{tool}来做，{detail}。"),
    ("memory", "我答应{name}在{date}之前把{project}的{doc}发过去，{detail}。"),
    ("memory", "提醒我在{date}之前续办{document}，{detail}。"),
    ("memory", "{project}的预算现在是{amount}元，{detail}。"),
    ("daily", "今天中午和{name}在{place}吃了{food}。"),
    ("daily", "早上去{city}的火车晚点了{minutes}分钟。"),
)
_ZH_FILLER = ("今天", "我们", "这个", "计划", "周末", "项目", "其实", "感觉", "还是", "可以", "一下", "看看",
              "朋友", "时间", "工作", "安排", "可能", "已经", "比较", "觉得", "晚上", "早上", "天气", "不错",
              "需要", "准备", "然后", "一起", "讨论", "问题")


class FactMaker:
    """Unique fact sentences and the chatter around them, in the configured locale."""

    def __init__(self, locale: str, rng: random.Random) -> None:
        self._zh = locale == "zh-CN"
        self._rng = rng
        self._slots = _ZH_SLOTS if self._zh else _EN_SLOTS
        self._templates = _ZH_TEMPLATES if self._zh else _EN_TEMPLATES
        self._used: set[str] = set()

    def fact(self, day: datetime) -> Fact:
        kind = self._rng.choices([k for k, _ in FACT_KINDS], [w for _, w in FACT_KINDS])[0]
        templates = [t for k, t in self._templates if k == kind]
        for _ in range(20):  # a fresh combination is almost always found at once
            text = self._fill(self._rng.choice(templates), day)
            if text not in self._used:
                break
        else:  # every fact unique, so a bullet seen twice is the code's doing, never the model's
            text = self._fill(self._rng.choice(templates), day) + (f"（{len(self._used)}）" if self._zh
                                                                    else f" (#{len(self._used)})")
        self._used.add(text)
        return Fact(text, kind, (day - START).days)

    def _fill(self, template: str, day: datetime) -> str:
        rng = self._rng
        values = {name: rng.choice(options) for name, options in self._slots.items()}
        when = day + timedelta(days=rng.randint(3, 60))
        values["date"] = f"{when.month}月{when.day}日" if self._zh else f"{when:%B} {when.day}"
        values["amount"] = str(rng.randrange(200, 20000, 50))
        values["minutes"] = str(rng.randint(5, 95))
        return template.format(**values)

    def user_message(self, day: datetime) -> tuple[str, Fact | None]:
        """Chatter, and about every other time a new fact after it."""
        text = self.chatter(8, 20)
        if self._rng.random() >= FACT_SHARE:
            return text, None
        fact = self.fact(day)
        return f"{text}{'' if self._zh else ' '}{fact.text}", fact

    def chatter(self, fewest: int, most: int) -> str:
        """A sentence of `fewest`..`most` filler words (Chinese: about half as many two-character words)."""
        words = self._rng.randint(fewest, most)
        if not self._zh:
            return sentence(self._rng, words)
        return "".join(self._rng.choice(_ZH_FILLER) for _ in range(words // 2 + 1)) + "。"


# -- the scripted memory model -----------------------------------------------------------


def _between(text: str, tag: str) -> str:
    """The text inside the first <tag>...</tag>, with the template's placeholder read as empty."""
    start = text.find(f"<{tag}>")
    end = text.find(f"</{tag}>", start + 1)
    if start == -1 or end == -1:
        return ""
    inner = text[start + len(tag) + 2:end].strip()
    return "" if inner in _EMPTY else inner


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")


def _was_cut_off(texts: list[str]) -> bool:
    """Whether a follow-up turn says the previous answer was cut off (not that it was too long).

    The previous answer, when it is sent back, is not valid JSON; else the follow-up says so
    in words (the cut-off prompts of both locales).
    """
    if len(texts) < 2:
        return False
    if len(texts) >= 3:
        try:
            json.loads(texts[-2])
        except ValueError:
            return True
    follow_up = texts[-1].lower()
    return any(words in follow_up for words in ("cut off", "max_tokens", "截断"))


def _is_bullet(line: str) -> bool:
    return line.startswith("- ")


def _keep(lines: list[str]) -> list[str]:
    """What a model keeps of a file it rewrites: everything but the seed's placeholder line."""
    return [line for line in lines if line.strip() and not _PLACEHOLDER.match(line.strip())]


def _drop_oldest(lines: list[str], target: int) -> list[str]:
    """Drop bullets from the top (oldest first, since new ones are appended) until `target` chars."""
    kept = list(lines)
    size = len("\n".join(kept))
    index = 0
    while size > target and index < len(kept):
        if _is_bullet(kept[index]):
            size -= len(kept[index]) + 1
            del kept[index]
        else:
            index += 1  # headings stay
    return kept


# One extraction request: (day from START, characters, tokens, characters of PROFILE.md +
# MEMORY.md as shown in the prompt).
Sample = tuple[int, int, int, int]


@dataclass(slots=True)
class ModelStats:
    memory_requests: list[Sample] = field(default_factory=list)
    replies: Counter[str] = field(default_factory=Counter)
    edits_replies: int = 0
    cut_replies: int = 0
    follow_ups: int = 0


class SoakModel:
    """An in-process LLMClient that answers memory and emergence requests like a careful model."""

    def __init__(self, facts: dict[str, Fact], *, profile_max: int, memory_max: int, labels: Sequence[str],
                 clock: SimClock, rng: random.Random) -> None:
        self._facts = facts  # user message text -> the fact it carries
        self._budgets = {"profile": profile_max, "memory": memory_max}
        self._labels = tuple(labels)
        self._clock = clock
        self._rng = rng
        self.stats = ModelStats()

    async def complete(self, request: LLMRequest, on_text: Any = None) -> LLMResponse:
        texts = [_text_of(m) for m in request.messages]
        if request.purpose == "memory":
            chars = len(request.system) + sum(len(t) for t in texts)
            tokens = estimate_tokens(request.system) + sum(estimate_tokens(t) for t in texts)
            files = len(_between(texts[0], "profile")) + len(_between(texts[0], "memory"))
            self.stats.memory_requests.append((self._clock.day, chars, tokens, files))
            reply = self._extraction(texts)
        elif request.purpose == "emergence":
            reply = self._emergence(texts)
        else:  # the bench calls nothing else; answer like a chat model anyway
            return self._respond(request, "OK.")
        if len(texts) > 1:
            self.stats.follow_ups += 1
        return self._respond(request, json.dumps(reply, ensure_ascii=False))

    def _respond(self, request: LLMRequest, text: str) -> LLMResponse:
        """The reply as the real API returns it: cut at max_tokens, with the stop reason saying so."""
        sent, cut = cut_to_tokens(text, request.max_tokens)
        self.stats.replies[request.purpose] += 1
        self.stats.cut_replies += cut
        return LLMResponse(text=sent, content=[{"type": "text", "text": sent}],
                           stop_reason="max_tokens" if cut else "end_turn",
                           input_tokens=sum(estimate_tokens(_text_of(m)) for m in request.messages),
                           output_tokens=estimate_tokens(sent), model=request.model)

    # -- extraction (S6 + the S19 edits form) ------------------------------------------

    def _new_facts(self, transcript: str) -> list[Fact]:
        found = []
        for line in transcript.splitlines():
            text = next((line[len(label):] for label in self._labels if line.startswith(label)), None)
            fact = self._facts.get(text.strip()) if text is not None else None
            if fact is not None:
                found.append(fact)
        return found

    def _extraction(self, texts: list[str]) -> dict[str, Any]:
        prompt = texts[0]
        asked_for_edits = _was_cut_off(texts)  # the S19 retry after a cut-off reply
        shorten = len(texts) > 1 and not asked_for_edits  # the S7 "over budget, shorter please"
        facts = self._new_facts(_between(prompt, "transcript"))
        if not facts:
            return {"should_update": False, "reason": "small talk only", "daily_entry": "",
                    "memory_update": "", "profile_update": ""}
        reply: dict[str, Any] = {
            "should_update": True,
            "reason": f"{len(facts)} new facts worth keeping",
            "daily_entry": "\n".join(f"- {f.text}" for f in facts),
        }
        edits_turn = asked_for_edits or self._rng.random() < EDITS_SHARE
        for name in ("profile", "memory"):
            new_lines = [f"- {self._today()}: {f.text}" for f in facts if f.kind == name]
            full, edits = self._file_change(name, _between(prompt, name), new_lines, edits_turn,
                                            asked_for_edits, shorten)
            reply[f"{name}_update"] = full
            if edits:
                reply[f"{name}_edits"] = edits
        if any(f"{name}_edits" in reply for name in ("profile", "memory")):
            self.stats.edits_replies += 1
        return reply

    def _today(self) -> str:
        """The date a careful model puts on a durable line (the prompt states it; so does the clock)."""
        return self._clock.now.date().isoformat()

    def _file_change(self, name: str, current: str, new_lines: list[str], edits_turn: bool,
                     asked_for_edits: bool, shorten: bool) -> tuple[str, list[dict[str, str]]]:
        """(full replacement, edits) for one file; ("", []) leaves it unchanged."""
        if not new_lines:  # nothing new for this file (asked to shorten, the other one was meant)
            return "", []
        budget = self._budgets[name]
        grown = len(current) + sum(len(line) + 1 for line in new_lines)
        target = int(budget * (SHORTEN_TO if shorten else CONDENSE_TO))
        condense = shorten or grown > budget * CONDENSE_AT
        large = len(current) >= budget * LARGE_SHARE
        if current and (asked_for_edits or (large and edits_turn)):
            return "", self._edits(current, new_lines, grown - target if condense else 0)
        lines = _keep(current.splitlines()) + new_lines
        if condense:
            lines = _drop_oldest(lines, target)
        return "\n".join(lines), []

    def _edits(self, current: str, new_lines: list[str], to_remove: int) -> list[dict[str, str]]:
        """Appends for the new lines; maybe one exact-line update; removals of the oldest bullets.

        Every `old` is a whole line found exactly once (with its line break for removals), as a
        careful model copies it: an edit that fails is then the code's failure, not the model's.
        """
        edits: list[dict[str, str]] = [{"append": line} for line in new_lines]
        bullets = [line for line in current.splitlines() if _is_bullet(line) and current.count(line) == 1]
        removed: set[str] = set()
        for line in bullets:  # oldest first
            if to_remove <= 0:
                break
            if current.count(line + "\n") == 1:
                edits.append({"old": line + "\n", "new": ""})
                removed.add(line)
                to_remove -= len(line) + 1
        candidates = [line for line in bullets if line not in removed and "✓" not in line]
        if candidates and self._rng.random() < UPDATE_EDIT_SHARE:
            line = self._rng.choice(candidates)
            edits.append({"old": line, "new": f"{line} ✓ {self._today()}"})
        return edits

    # -- emergence (S8) ------------------------------------------------------------------

    def _emergence(self, texts: list[str]) -> dict[str, Any]:
        memory = _between(texts[0], "memory")
        budget = self._budgets["memory"]
        cut_off = _was_cut_off(texts)
        if len(texts) == 1 and len(memory) < budget * EMERGE_AT:
            return {"should_update": False, "reason": "MEMORY.md already reflects the notes", "memory_content": ""}
        shorten = len(texts) > 1 and not cut_off
        target = int(budget * (SHORTEN_TO if shorten else EMERGE_TO))
        reason = "condensed the older points"
        if cut_off:  # asked to answer shorter: the same condensation as deletions
            self.stats.edits_replies += 1
            return {"should_update": True, "reason": reason, "memory_content": "",
                    "memory_edits": self._edits(memory, [], len(memory) - target)}
        content = "\n".join(_drop_oldest(_keep(memory.splitlines()), target))
        return {"should_update": True, "reason": reason, "memory_content": content}


# -- the soak ---------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    """What one phase (warm-up or measured days) saw."""

    extractions: int = 0
    failures: int = 0
    failed_extractions: int = 0
    failed_attempts: int = 0
    skipped_extractions: int = 0
    emergence_runs: int = 0
    emergence_updates: int = 0
    emergence_failures: int = 0
    max_budget_ratio: float = 0.0
    reasons: Counter[str] = field(default_factory=Counter)


@dataclass(slots=True)
class RunCursor:
    """The newest mate_memory_run id already looked at, across both phases."""

    last_id: int = 0


def _batch_rows(maker: FactMaker, facts: dict[str, Fact], day: datetime, count: int
                ) -> list[tuple[str, str, int]]:
    """`count` messages, user first; about half the user messages carry a new fact.

    Plain text rows (role, content, tokens): the stored content_format is then "text".
    """
    rows = []
    for index in range(count):
        if index % 2 == 0:
            text, fact = maker.user_message(day)
            if fact is not None:
                facts[text] = fact
            rows.append(("user", text, estimate_tokens(text)))
        else:
            text = maker.chatter(15, 40)
            rows.append(("assistant", text, estimate_tokens(text)))
    return rows


async def _measure_budgets(core: Core, tally: Tally) -> None:
    memory = core.config.mate.memory
    for filename, budget in ((PROFILE_FILE, memory.profile_max_chars), (MEMORY_FILE, memory.memory_max_chars)):
        text, _ = await core.workspace.read_text(AGENT_ID, filename)
        tally.max_budget_ratio = max(tally.max_budget_ratio, len(text) / budget)


async def _new_failed_rows(core: Core, tally: Tally, cursor: RunCursor, kind: str) -> int:
    """Failed mate_memory_run rows of `kind` written since the last look."""
    rows = [r for r in await core.repos.memory_runs.recent(AGENT_ID, limit=200) if r.id > cursor.last_id]
    cursor.last_id = max([cursor.last_id, *(r.id for r in rows)])
    failed = [r for r in rows if r.kind == kind and r.status == "failed"]
    for row in failed:
        tally.reasons[(row.error or row.reason or "?")[:80]] += 1
    return len(failed)


async def _extract(core: Core, service: MemorySummarizationService, tally: Tally, cursor: RunCursor,
                   upto: int) -> None:
    outcome = await service.analyze_and_update_memory(AGENT_ID, CONVERSATION, upto_message_id=upto)
    rows = await _new_failed_rows(core, tally, cursor, RUN_KIND)
    failed = outcome.status == "failed"
    tally.extractions += 1
    tally.failed_attempts += rows
    tally.failed_extractions += failed
    tally.skipped_extractions += outcome.status == "skipped"
    # A failure is counted once whether it shows as rows, as the outcome, or both.
    tally.failures += max(rows, int(failed))
    if failed and not rows:
        tally.reasons[outcome.reason[:80]] += 1
    await _measure_budgets(core, tally)


async def _emerge(core: Core, service: MemoryEmergenceService, tally: Tally, cursor: RunCursor) -> None:
    outcome = await service.emerge(AGENT_ID)
    await _new_failed_rows(core, tally, cursor, "emergence")
    tally.emergence_runs += 1
    tally.emergence_updates += outcome.updated
    tally.emergence_failures += outcome.status == "failed"
    await _measure_budgets(core, tally)


@dataclass(frozen=True, slots=True)
class NoteCounts:
    """Daily-note bullets of one phase: repeats, all bullets, planted facts recorded."""

    duplicates: int = 0
    bullets: int = 0
    recorded: int = 0


async def _daily_notes(core: Core, facts: dict[str, Fact], warmup_days: int) -> tuple[NoteCounts, NoteCounts]:
    """(warm-up, measured) counts over all daily notes.

    A bullet's first occurrence is the original; each later one (by note date) is a duplicate
    of the phase its note belongs to. A note whose name carries no date counts as measured.
    """
    occurrences: dict[str, list[int]] = {}
    for note in await core.workspace.list(AGENT_ID, DAILY_PREFIX):
        match = _NOTE_DATE.search(note.filename)
        day = (datetime.fromisoformat(match.group(1)).date() - START.date()).days if match else warmup_days
        for line in note.content.splitlines():
            if _is_bullet(line.strip()):
                occurrences.setdefault(line.strip(), []).append(day)
    duplicates, bullets = [0, 0], [0, 0]
    for days in occurrences.values():
        days.sort()
        for index, day in enumerate(days):
            phase = int(day >= warmup_days)
            bullets[phase] += 1
            duplicates[phase] += index > 0
    recorded = [0, 0]
    for fact in facts.values():
        recorded[int(fact.day >= warmup_days)] += f"- {fact.text}" in occurrences
    warm, measured = (NoteCounts(duplicates[p], bullets[p], recorded[p]) for p in (0, 1))
    return warm, measured


RECALL_AGES_DAYS = (1, 7, 30)
RECALL_WINDOWS = (24_000, 96_000)  # today's working window, and the trigger it replaced
_MESSAGE_OVERHEAD = 4  # bot.context.tokens.PER_MESSAGE_OVERHEAD


def _window_starts(tokens: list[int], limit: int, kept: int = 4) -> list[int]:
    """For each message index, the index of the oldest message still sent word for word when it
    is the new message: the window folds all but the last `kept` messages (two exchanges) once
    the conversation passes `limit` tokens, as the window manager does (the summary not counted)."""
    starts: list[int] = []
    start, used = 0, 0
    for index, count in enumerate(tokens):
        used += count + _MESSAGE_OVERHEAD
        if used > limit and index - kept > start:
            start = index - kept
            used = sum(t + _MESSAGE_OVERHEAD for t in tokens[start:index + 1])
        starts.append(start)
    return starts


async def _recall(core: Core, facts: dict[str, Fact], warmup_days: int, messages_per_day: int) -> dict[str, Any]:
    """Where a fact stated in the measured days is, when the user asks about it 1, 7 or 30 days
    (of this chat) later: in the words sent (the working window), in PROFILE.md / MEMORY.md (the
    system prompt; their state at the end of the run, so older asks are a lower bound), or
    only in the daily notes (reachable through memory search). The window's summary (300
    tokens) is not counted: it keeps a few lines, not days of facts."""
    rows = await core.repos.messages.after(CONVERSATION, 0, limit=1 << 30)
    tokens = [r.token_count for r in rows]
    files = "".join([(await core.workspace.read_text(AGENT_ID, name))[0] for name in (PROFILE_FILE, MEMORY_FILE)])
    notes = "".join(note.content for note in await core.workspace.list(AGENT_ID, DAILY_PREFIX))
    stated = [(index, facts[r.content]) for index, r in enumerate(rows)
              if r.role == "user" and r.content in facts and facts[r.content].day >= warmup_days]
    result: dict[str, Any] = {}
    for limit in RECALL_WINDOWS:
        starts = _window_starts(tokens, limit)
        by_age: dict[str, Any] = {}
        for age in RECALL_AGES_DAYS:
            asked = [(i, f) for i, f in stated if i + age * messages_per_day < len(rows)]
            if not asked:
                continue
            window = sum(1 for i, _ in asked if i >= starts[i + age * messages_per_day])
            in_files = sum(1 for _, f in asked if f.text in files)
            either = sum(1 for i, f in asked if i >= starts[i + age * messages_per_day] or f.text in files)
            in_notes = sum(1 for _, f in asked if f.text in notes)
            by_age[f"{age}d"] = {"asked": len(asked), "window": round(window / len(asked), 3),
                                 "files": round(in_files / len(asked), 3),
                                 "window_or_files": round(either / len(asked), 3),
                                 "daily_notes": round(in_notes / len(asked), 3)}
        result[str(limit)] = by_age
    return result


def _growth(samples: list[Sample], start: int, end: int, size: Callable[[Sample], int]
            ) -> tuple[float, float, float | None]:
    """(first-week mean, last-week mean, last over first) of one measure of the request sizes
    sent on days `start` .. `end` - 1."""
    week = min(WEEK, end - start)
    first = [size(s) for s in samples if start <= s[0] < start + week]
    last = [size(s) for s in samples if end - week <= s[0] < end]
    if not first or not last:
        return 0.0, 0.0, None
    first_mean, last_mean = statistics.fmean(first), statistics.fmean(last)
    return round(first_mean, 1), round(last_mean, 1), round(last_mean / first_mean, 3)


async def run_memory_soak(*, days: int = 60, warmup_days: int = 30, messages_per_day: int = 40, batch: int = 10,
                          locale: str = "en", seed: int = 7, memory_config: Mapping[str, object] | None = None
                          ) -> dict[str, Any]:
    """The soak; `memory_config` overrides mate.memory keys (kebab-case), for experiments."""
    rng = random.Random(seed)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="matebot-bench-") as tmp:
        config = make_config(Path(tmp), locale=locale, memory={"cooldown-minutes": 0, **(memory_config or {})})
        mate = config.mate
        clock = SimClock()
        facts: dict[str, Fact] = {}
        maker = FactMaker(locale, rng)
        async with open_core(config) as core:
            labels = [core.prompts.text("transcript_user"), "User: ", "用户: "]
            model = SoakModel(facts, profile_max=mate.memory.profile_max_chars,
                              memory_max=mate.memory.memory_max_chars, labels=labels, clock=clock, rng=rng)
            # As the daemon wires them (bot/runtime.py), with the bench's clock; retries without waiting.
            summarizer = MemorySummarizationService(mate, core.repos, core.workspace, model, core.prompts,
                                                    clock=clock, retry=NO_WAITS)
            emergence = MemoryEmergenceService(mate, core.repos, core.workspace, model, core.prompts, clock=clock,
                                               retry=NO_WAITS)
            await core.repos.conversations.create(CONVERSATION, agent_id=AGENT_ID, channel="web",
                                                  chat_key=CONVERSATION, trigger_source="web")
            warm, tally, cursor = Tally(), Tally(), RunCursor()
            warm_stats = model.stats
            batches = max(1, math.ceil(messages_per_day / batch))
            step = (LAST_BATCH_HOUR - FIRST_BATCH_HOUR) / max(1, batches - 1)
            for day in range(warmup_days + days):
                if day == warmup_days:  # the measured days start: the model counts afresh
                    model.stats = ModelStats()
                phase = warm if day < warmup_days else tally
                left = messages_per_day
                for index in range(batches):
                    clock.at(day, FIRST_BATCH_HOUR + index * step)
                    rows = _batch_rows(maker, facts, clock.now, min(batch, left))
                    left -= len(rows)
                    ids = await core.repos.messages.add_many(CONVERSATION, rows)
                    await _extract(core, summarizer, phase, cursor, ids[-1])
                clock.at(day + 1, EMERGENCE_HOUR)  # the night after `day`: still that day's phase
                await _emerge(core, emergence, phase, cursor)
            warm_notes, notes = await _daily_notes(core, facts, warmup_days)
            recall = await _recall(core, facts, warmup_days, messages_per_day)
            final_memory = len((await core.workspace.read_text(AGENT_ID, MEMORY_FILE))[0])
            final_profile = len((await core.workspace.read_text(AGENT_ID, PROFILE_FILE))[0])
    stats = model.stats
    samples = stats.memory_requests  # measured days only (day >= warmup_days)
    end = warmup_days + days
    first_chars, last_chars, growth = _growth(samples, warmup_days, end, lambda s: s[1])
    _, _, growth_tokens = _growth(samples, warmup_days, end, lambda s: s[2])
    # The two files may rightly fill up to their budgets; everything else should stay flat.
    _, _, growth_rest = _growth(samples, warmup_days, end, lambda s: s[1] - s[3])
    # A brand-new install: the first warm-up week (empty files) as the first week.
    _, _, growth_from_empty = _growth(warm_stats.memory_requests + samples, 0, end, lambda s: s[1])
    return {
        "bench": "memory_soak",
        "failures": tally.failures,
        "duplicates": notes.duplicates,
        "max_budget_ratio": round(tally.max_budget_ratio, 3),
        "request_growth": growth,
        "locale": locale,
        "days": days,
        "warmup_days": warmup_days,
        "messages": days * messages_per_day,
        "facts_planted": sum(1 for f in facts.values() if f.day >= warmup_days),
        "extractions": tally.extractions,
        "failed_extractions": tally.failed_extractions,
        "failed_attempts": tally.failed_attempts,
        "skipped_extractions": tally.skipped_extractions,
        "emergence_runs": tally.emergence_runs,
        "emergence_updates": tally.emergence_updates,
        "emergence_failures": tally.emergence_failures,
        "memory_llm_replies": stats.replies["memory"],
        "emergence_llm_replies": stats.replies["emergence"],
        "edits_replies": stats.edits_replies,
        "cut_replies": stats.cut_replies,
        "follow_up_requests": stats.follow_ups,
        "daily_bullets": notes.bullets,
        "facts_in_daily_notes": notes.recorded,
        "final_memory_chars": final_memory,
        "final_profile_chars": final_profile,
        "request_chars_first_week": first_chars,
        "request_chars_last_week": last_chars,
        "request_growth_tokens": growth_tokens,
        "request_growth_besides_files": growth_rest,
        "request_growth_from_empty": growth_from_empty,
        "failure_reasons": dict(tally.reasons.most_common(3)),
        # Facts asked about later, by conversation tokens sent word for word (working window).
        "recall_by_window_tokens": recall,
        # The warm-up is not measured, but nothing it saw is hidden.
        "warmup_failures": warm.failures,
        "warmup_duplicates": warm_notes.duplicates,
        "warmup_max_budget_ratio": round(warm.max_budget_ratio, 3),
        "warmup_emergence_failures": warm.emergence_failures,
        "warmup_failure_reasons": dict(warm.reasons.most_common(3)),
        "seconds": round(time.perf_counter() - started, 2),
        "llm": "in-process scripted memory model: reads the files from the prompt, obeys max_tokens",
        "target": "failures 0, duplicates 0, max_budget_ratio <= 1, request_growth <= 1.5 (measured days)",
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="bench.memory_soak", description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=60, help="measured days, after the warm-up")
    parser.add_argument("--warmup-days", type=int, default=30,
                        help="days run first, from an empty install, and not counted in the metrics")
    parser.add_argument("--messages-per-day", type=int, default=40, help="user and assistant, alternating")
    parser.add_argument("--batch", type=int, default=10, help="messages between two extractions")
    parser.add_argument("--locale", choices=("en", "zh-CN"), default="en")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.days < 1 or args.warmup_days < 0 or args.messages_per_day < 2 or args.batch < 2:
        parser.error("--days must be >= 1, --warmup-days >= 0, --messages-per-day and --batch >= 2")
    quiet_logs()
    load = HostLoad()
    with _quiet_memory_warnings():
        result = asyncio.run(run_memory_soak(days=args.days, warmup_days=args.warmup_days,
                                             messages_per_day=args.messages_per_day, batch=args.batch,
                                             locale=args.locale, seed=args.seed))
    return emit(result, load)


@contextlib.contextmanager
def _quiet_memory_warnings() -> Iterator[None]:
    """Each failed attempt logs a warning; the bench counts them (failures, failure_reasons)
    instead of printing hundreds of lines. Restored after, for a test process that goes on."""
    loggers = [logging.getLogger(name) for name in ("memory.summarization", "memory.emergence")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


if __name__ == "__main__":
    main()
