"""Each fact of a daily entry linked to the message it came from, so search finds that message
by the fact's words too (bot/storage/facts.py).

An entry says in a few words what a turn said at length, with the names and dates resolved
("Caroline went to an LGBTQ support group on 7 May" for "I went to a LGBTQ support group
yesterday"). The model is not asked where each fact came from (a small model's answer would
be one more thing to get wrong); the turn of the batch that shares the most of the fact's
rarer words is taken, its speaker's turn first when the fact names them. On LoCoMo's
observations (facts with the turn each came from) this picks the right turn for 82 % of them.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from bot.core.records import MessageRecord
from bot.storage.facts import FactLink
from memory.recall.search import names_in, speaker, word_terms

SPEAKER_BONUS = 1.2  # a turn by the person the fact names
_BULLET = re.compile(r"^\s*(?:[-*•·]|\d{1,3}[.)]|\[[ xX]\])\s*")
_MIN_TERMS = 2  # "- ok" is no fact anyone searches for


def fact_lines(entry: str) -> list[str]:
    """The facts of a daily entry: its lines without bullets, headings and blanks."""
    facts = []
    for line in entry.splitlines():
        text = line.strip()
        while _BULLET.match(text):  # "- [x] ..." has two
            text = _BULLET.sub("", text, count=1).strip()
        if text and not text.startswith("#") and len(word_terms(text)) >= _MIN_TERMS:
            facts.append(text)
    return facts


def linked_facts(entry: str, batch: Sequence[MessageRecord]) -> list[FactLink]:
    """Each fact of `entry` with the turn of `batch` it most likely came from; a fact that
    shares no word with any turn is left unlinked (it is still found in the daily note)."""
    turns = [(m, set(word_terms(m.content))) for m in batch
             if m.role in ("user", "assistant") and m.content_format == "text" and m.content.strip()]
    if not turns:
        return []
    counts = Counter(term for _, terms in turns for term in terms)
    links = []
    for fact in fact_lines(entry):
        wanted = set(word_terms(fact))
        scores = []
        for message, terms in turns:
            shared = sum(math.log(1 + len(turns) / counts[term]) for term in wanted & terms)
            said_by = speaker(message.content) or message.sender_name
            scores.append(shared * (SPEAKER_BONUS if said_by and names_in(fact, said_by) else 1.0))
        best = max(range(len(turns)), key=scores.__getitem__)  # the first of equals: the earlier turn
        if scores[best] > 0:
            links.append(FactLink(turns[best][0].id, fact))
    return links
