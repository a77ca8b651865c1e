"""The text the word index stores: CJK characters one per token, and each row's date in words.

SQLite's unicode61 tokenizer reads a run of Chinese or Japanese characters as one token,
so no word inside it could be found. Spaced out, each character is a token and a
two-character word is a two-token phrase; the trigram table beside it finds longer
substrings. The function is registered on every connection the daemon opens, because
the index triggers call it.

The index's date column holds each row's date as the migrations write it, "7 May 2023
Sunday"; `query_dates` finds the dates a query names (English and Chinese) as those words.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import date, timedelta

FUNCTION_NAME = "mate_search_spaced"

# Kana, Han (incl. extension A and compatibility) and Hangul syllables: scripts whose
# words are not separated by spaces, or carry their particles attached (Korean).
CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK = re.compile(f"([{CJK_CHARS}])")

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
WEEKDAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
# Short forms that are no other English word ("mar", "sat" and "sun" are).
_MONTH_OF = {name: name for name in MONTHS} | {name[:3]: name for name in MONTHS if name[:3] not in ("mar", "may")} \
    | {"sept": "september"}
_DAY = r"(?:[12]?\d|3[01])(?:st|nd|rd|th)?(?!\d)"
_YEAR = r"(?:19|20)\d\d(?!\d)"
# A day counts only beside a month ("7 May", "May 7th", "8th of December"): a lone number
# is rarely a date.
_EN_DATE = re.compile(
    rf"\b(?:(?P<before>{_DAY})\s+(?:of\s+)?)?(?P<month>{'|'.join(sorted(_MONTH_OF, key=len, reverse=True))})\b\.?"
    rf"(?:\s*(?P<after>{_DAY})\b)?(?:,?\s*(?P<in_year>{_YEAR}))?"
    rf"|\b(?P<iso_year>{_YEAR})-(?P<iso_month>1[0-2]|0?[1-9])(?:-(?P<iso_day>3[01]|[12]\d|0?[1-9]))?(?!\d)"
    rf"|\b(?P<weekday>{'|'.join(WEEKDAYS)})s?\b|\b(?P<year>{_YEAR})\b")
_ZH_NUMBER = {c: n for n, c in enumerate("一二三四五六七八九十", 1)} | {"十一": 11, "十二": 12}
_ZH_WEEKDAY = {"日": 0, "天": 0} | {c: n for n, c in enumerate("一二三四五六", 1)}
_ZH_MONTH = r"(?<![\d一二三四五六七八九十])(?P<month>1[0-2]|0?[1-9]|十[一二]|[一二三四五六七八九十])\s*月(?:\s*(?P<day>\d{1,2})\s*[日号])?"
_ZH_DATE = re.compile(
    rf"(?<!\d)(?P<year>\d{{4}})\s*年\s*(?:{_ZH_MONTH})?|{_ZH_MONTH.replace('?P<month>', '?P<only_month>').replace('?P<day>', '?P<only_day>')}"
    r"|(?:星期|礼拜|周)(?P<weekday>[一二三四五六日天])")


@dataclass(frozen=True, slots=True)
class QueryDates:
    phrases: list[str]  # as the date column writes them: "7 may 2023", "may", "sunday"
    rest: str  # the query without its dates


def normalised(text: str) -> str:
    """Full-width letters and digits as plain ones (ｉＰｈｏｎｅ is iPhone), and text that
    cannot be encoded (lone surrogates) made safe."""
    text = unicodedata.normalize("NFKC", text)
    return text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text


def spaced(text: str | None) -> str:
    if not text:
        return ""
    return _CJK.sub(r" \1 ", normalised(text))


# Dates named relative to today: "yesterday", "3 days ago", "last week", "last Friday", "this
# weekend", "this month", "the past year"; 昨天, 前天, 三天前, 上周, 上周五, 这周末, 上个月, 去年.
_EN_COUNT = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
             "eight": 8, "nine": 9, "ten": 10}
_EN_RELATIVE = re.compile(
    r"\b(?P<before_yesterday>(?:the\s+)?day\s+before\s+yesterday)\b|\b(?P<yesterday>yesterday)\b"
    r"|\b(?P<today>today|tonight|this\s+morning|this\s+afternoon|this\s+evening)\b"
    rf"|\b(?P<count>\d{{1,3}}|{'|'.join(_EN_COUNT)})\s+(?P<unit>day|week|month|year)s?\s+ago\b"
    rf"|\b(?P<which>last|this|past)\s+(?P<span>week|weekend|month|year|{'|'.join(WEEKDAYS)})\b")
_ZH_DIGIT = "〇零一二两三四五六七八九十百千万"
_ZH_RELATIVE = re.compile(
    r"(?P<before_yesterday>前天)|(?P<yesterday>昨天|昨晚)|(?P<today>今天|今晚|今早)"
    rf"|(?<![\d{_ZH_DIGIT}])(?P<count>\d{{1,3}}|[一二两三四五六七八九]?十[一二三四五六七八九]?|[一二两三四五六七八九])"
    r"\s*个?(?P<unit>天|周|星期|礼拜|月|年)前"
    r"|(?P<which>上|这|本)个?(?:(?P<weekend>周末)|(?P<span>周(?![围边到全年期刊])|星期|礼拜|月)"
    r"(?:(?P<weekday>[一二三四五六日天])(?![起下样直共定些点般气]))?)|(?P<year>去年|今年)")
_ZH_UNIT = {"天": "day", "周": "week", "星期": "week", "礼拜": "week", "月": "month", "年": "year"}
_LIMITS = {"day": 366, "week": 52, "month": 12, "year": 10}  # "500 days ago" is no date anyone means


def _day(when: date) -> str:
    return f"{when.day} {MONTHS[when.month - 1]} {when.year}"


def _month(when: date) -> str:
    return f"{MONTHS[when.month - 1]} {when.year}"


def _months_back(today: date, count: int) -> date:
    months = today.year * 12 + today.month - 1 - count
    return date(months // 12, months % 12 + 1, 1)


def _week_days(today: date, back: int, days: range = range(7)) -> list[str]:
    """Days of the week (Monday 0 to Sunday 6) `back` weeks before today's."""
    monday = today - timedelta(days=today.weekday() + 7 * back)
    return [_day(monday + timedelta(days=n)) for n in days]


def _back(today: date, unit: str, count: int) -> list[str]:
    """The date-column phrases of the day, week, month or year `count` of them before today's."""
    if count > _LIMITS[unit]:
        return []
    if unit == "day":
        return [_day(today - timedelta(days=count))]
    if unit == "week":
        return _week_days(today, count)
    if unit == "month":
        return [_month(_months_back(today, count))]
    return [str(today.year - count)]


def _zh_count(text: str) -> int:
    """一 to 九十九 (两 is 2), or digits."""
    if text.isdigit():
        return int(text)
    digits = _ZH_NUMBER | {"两": 2}
    tens, ten, ones = text.partition("十")
    return digits.get(tens, 1) * 10 + digits.get(ones, 0) if ten else digits[text]


def _weekday(today: date, back: int, sunday_based: int) -> list[str]:
    """One day (WEEKDAYS' number: Sunday 0) of the week `back` weeks before today's."""
    monday_based = (sunday_based - 1) % 7
    return _week_days(today, back, range(monday_based, monday_based + 1))


def _named_day(found: re.Match[str], today: date) -> list[str] | None:
    """Today, yesterday or the day before, where the match is one of them (both languages' group names)."""
    if found["before_yesterday"] or found["yesterday"] or found["today"]:
        return _back(today, "day", 2 if found["before_yesterday"] else 1 if found["yesterday"] else 0)
    return None


def _english(found: re.Match[str], today: date) -> list[str]:
    if (day := _named_day(found, today)) is not None:
        return day
    if found["count"]:
        count = found["count"]
        return _back(today, found["unit"], int(count) if count.isdigit() else _EN_COUNT[count])
    which, span = found["which"], found["span"]
    if span in WEEKDAYS:
        if which == "this":  # that day of this week
            return _weekday(today, 0, WEEKDAYS.index(span))
        gap = (today.weekday() + 1 - WEEKDAYS.index(span)) % 7 or 7  # "last Friday": the latest before today
        return [_day(today - timedelta(days=gap))]
    if span == "weekend":
        return _week_days(today, 1 if which == "last" else 0, range(5, 7))
    if which == "past":  # the past week: the seven days up to today; the past month or year: this one and the last
        if span == "week":
            return [_day(today - timedelta(days=n)) for n in range(7)]
        return [*_back(today, span, 0), *_back(today, span, 1)]
    return _back(today, span, 1 if which == "last" else 0)


def _chinese(found: re.Match[str], today: date) -> list[str]:
    if (day := _named_day(found, today)) is not None:
        return day
    if found["count"]:
        return _back(today, _ZH_UNIT[found["unit"]], _zh_count(found["count"]))
    if found["year"]:
        return [str(today.year - (found["year"] == "去年"))]
    back = 1 if found["which"] == "上" else 0
    if found["weekend"]:
        return _week_days(today, back, range(5, 7))
    if found["span"] == "月":
        return _back(today, "month", back)
    if found["weekday"]:
        return _weekday(today, back, _ZH_WEEKDAY[found["weekday"]])
    return _week_days(today, back)


def _relative_dates(query: str, today: date) -> tuple[list[str], str]:
    """The phrases of the relative dates `query` names, and the query without them (a date too
    far back to mean anything stays in the query as words)."""
    phrases: list[str] = []

    def taken(read: list[str], found: re.Match[str]) -> str:
        phrases.extend(read)
        return " " if read else found.group(0)

    rest = _EN_RELATIVE.sub(lambda found: taken(_english(found, today), found), query)
    rest = _ZH_RELATIVE.sub(lambda found: taken(_chinese(found, today), found), rest)
    return phrases, rest


def query_dates(query: str, today: date | None = None) -> QueryDates:
    """The dates `query` names, as phrases of the index's date column ("7 may 2023", "may
    2023", "may", "2023", "sunday"): a month with its day and year if given, years, weekdays;
    in English or Chinese (2023年5月7日, 周二). Given `today`, also the dates it names relative
    to it ("yesterday" -> "6 december 2026", "last week" -> its seven days, 上个月 -> "november 2026")."""
    phrases: list[str] = []
    text = normalised(query).lower()
    if today is not None:
        phrases, text = _relative_dates(text, today)

    def date(day: str | None, month: str | None, year: str | None) -> None:
        number = int(day.rstrip("stndrh")) if day and month else 0  # "8th" is the 8th
        phrases.append(" ".join(part for part in (str(number) if 1 <= number <= 31 else "", month, year) if part))

    def english(found: re.Match[str]) -> str:
        if found["month"]:
            date(found["before"] or found["after"], _MONTH_OF[found["month"]], found["in_year"])
        if found["iso_year"]:
            date(found["iso_day"], MONTHS[int(found["iso_month"]) - 1], found["iso_year"])
        phrases.extend(part for part in (found["weekday"], found["year"]) if part)
        return " "

    def chinese(found: re.Match[str]) -> str:
        month = found["month"] or found["only_month"]
        number = (int(month) if month.isdigit() else _ZH_NUMBER[month]) if month else 0
        if found["year"] or month:
            date(found["day"] or found["only_day"], MONTHS[number - 1] if month else None, found["year"])
        if found["weekday"]:
            phrases.append(WEEKDAYS[_ZH_WEEKDAY[found["weekday"]]])
        return " "

    rest = _ZH_DATE.sub(chinese, _EN_DATE.sub(english, text))
    return QueryDates(list(dict.fromkeys(phrases)), rest)
