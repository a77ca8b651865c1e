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


def query_dates(query: str) -> QueryDates:
    """The dates `query` names, as phrases of the index's date column ("7 may 2023", "may
    2023", "may", "2023", "sunday"): a month with its day and year if given, years, weekdays;
    in English or Chinese (2023年5月7日, 周二)."""
    phrases: list[str] = []

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

    rest = _ZH_DATE.sub(chinese, _EN_DATE.sub(english, normalised(query).lower()))
    return QueryDates(list(dict.fromkeys(phrases)), rest)
