"""The memory soak's planted facts: unique fact sentences and the chatter around them, in English or Chinese."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from bench._common import sentence

START = datetime(2026, 1, 5, tzinfo=timezone.utc)  # a Monday, the first warm-up day; the config's zone is UTC
FACT_SHARE = 0.5  # of user messages
FACT_KINDS = (("profile", 0.15), ("memory", 0.45), ("daily", 0.40))


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
