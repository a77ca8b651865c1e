"""MemorySearchService: natural-language search over what an agent was told and wrote down.

A question ("what did I say my sister's name was?") is not an FTS5 query: plain FTS5
requires every word, so a question finds nothing. Here the question's stop words are
dropped and the remaining terms OR-ed, ranked by BM25 (newer first on a tie); Chinese and
Japanese are searched as two-character words. A hit on the whole question as an exact
phrase ranks first. A conversation hit carries the two messages before and after it, so
the model can answer from the hit without reading the whole conversation.

With semantic search on (memory/recall/embeddings.py), the query's nearest rows by meaning are
fused with the lexical ranking by weighted reciprocal rank fusion: a row scores
weight/(k + rank) in each ranking it is in, so a paraphrase no word matches can still make
the top results, and a row both rankings like moves up. Exact-phrase hits stay first. No
vectors, or no answer from the endpoint in time: the lexical ranking as it is.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Protocol

from bot.core.clock import Clock, utc_now, zone
from bot.core.errors import MateError
from bot.core.prompts import PromptLibrary
from bot.storage.search import ContextMessage, SearchHit, SearchReads, SearchRepository
from bot.storage.search_text import CJK_CHARS, normalised, query_dates, spaced

DEFAULT_LIMIT = 5
MAX_LIMIT = 20
# A query is a few words or a question: a pasted page is refused with the reason, not
# searched. One rule for the tool, the API, /memory search and the CLI.
MAX_QUERY_CHARS = 1_000
MAX_TERMS = 32  # a long question must not become hundreds of OR-ed terms
PHRASE_CHARS = (3, 200)  # substrings need 3 characters; longer than this is not a phrase anyone means
PHRASE_TOKENS = 8  # a longer query is a question, not a phrase anyone expects word for word
# Fusion, measured on LoCoMo dev with all-MiniLM-L6-v2 (lexical alone: recall@5 0.649): the
# textbook k = 60 with equal weights let rows both rankings hold low outrank the words' best
# (0.587); the words' ranking is the stronger one here (vectors alone: 0.397), so it keeps the
# larger say and the first ranks count more: k = 10, vectors weigh 0.3 -> 0.654 (0.651-0.659
# for weights 0.2-0.5, k 5-10, depth 10-40).
FUSION_DEPTH = 20  # rows taken from each ranking before they are fused
RRF_K = 10
SEMANTIC_WEIGHT = 0.3  # the lexical ranking weighs 1
# A group message by a person the query names ranks as if its BM25 score were this much better
# (LoCoMo dev: 95 % of the evidence is said by a person the question names, whose name is in
# half the group's rows and so weighs nothing as a word; recall@5 0.649 -> 0.672, evidence
# shown 0.863 -> 0.871; 1.3-1.7 measure the same). The word ranking is read this deep so a
# named person's row from further down can move up.
SPEAKER_BOOST = 1.5
SPEAKER_DEPTH = 2  # times the results asked for
SNIPPET_CHARS = 240
CONTEXT_CHARS = 160
CONTEXT_MESSAGES = 2

_TOKEN = re.compile(rf"[{CJK_CHARS}]+|[^\W_]+", re.UNICODE)
# Unicode's control characters (Cc) but tab, line feed and carriage return, which are only
# spaces in a query. A NUL would end an FTS5 string early; none of them is ever searched for.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CJK_RUN = re.compile(rf"^[{CJK_CHARS}]+$")

# Words too common to mean anything in a question: English and Chinese.
_STOP_EN = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just let me more most my myself no nor not now of off
on once only or other our ours ourselves out over own please same she should so some such tell than that the
their theirs them themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves remember remind
said say says told know knew recall again ever anything something thing things hey hi hello ok okay thanks
thank
""".split())
_STOP_ZH_WORDS = frozenset({"什么", "怎么", "哪里", "哪儿", "哪个", "为什么", "是不是", "有没有", "记得", "告诉", "说过",
                            "一下", "知道", "时候", "我们", "你们", "他们", "她们", "这个", "那个", "一个"})
_STOP_ZH_CHARS = frozenset("吗呢吧啊呀的了是我你他她它们在有和也都就要会能这那个还说过请谁哪几对把被给")


class SearchQueryRefused(MateError):
    """A query the search does not run: too long, or holding a control character.

    The message is the English text; `text(prompts)` says it in the caller's language.
    """

    def __init__(self, key: str, **values: object) -> None:
        self.key = key
        self.values = values
        super().__init__(self.text(PromptLibrary("en")))

    def text(self, prompts: PromptLibrary) -> str:
        return prompts.text(self.key, **self.values)


def query_problem(query: str) -> SearchQueryRefused | None:
    """Why `query` is refused, or None; checked before any search work."""
    if len(query) > MAX_QUERY_CHARS:
        return SearchQueryRefused("search_query_too_long", length=len(query), limit=MAX_QUERY_CHARS)
    if found := _CONTROL.search(query):
        return SearchQueryRefused("search_query_control", character=f"U+{ord(found.group()):04X}")
    return None


def word_terms(query: str) -> list[str]:
    """The search terms of a question: words without stop words; CJK text as its two-character
    pieces, leaving out those that are stop words or made of stop characters only (a stop
    character inside a word, as 过 in 过敏, keeps the word)."""
    terms: list[str] = []
    singles: list[str] = []  # lone CJK characters: noise beside real words, better than nothing alone
    for token in _TOKEN.findall(normalised(query).lower()):
        if _CJK_RUN.match(token):
            if len(token) == 1 and token not in _STOP_ZH_CHARS:
                singles.append(token)
            for i in range(len(token) - 1):
                pair = token[i:i + 2]
                if pair not in _STOP_ZH_WORDS and not set(pair) <= _STOP_ZH_CHARS:
                    terms.append(pair)
        elif token not in _STOP_EN and (len(token) > 1 or token.isdigit()):
            terms.append(token)
    unique = list(dict.fromkeys(terms)) or list(dict.fromkeys(singles))
    return unique[:MAX_TERMS]


class SemanticRanking(Protocol):
    async def similar(self, agent_id: int, query: str, source: str, limit: int) -> list[SearchHit]:
        """The agent's rows nearest the query in meaning, best first; [] when none can be had."""
        ...


def fused(rankings: list[tuple[float, list[SearchHit]]], k: int = RRF_K) -> list[SearchHit]:
    """Weighted reciprocal rank fusion of (weight, ranking) pairs: a row scores the sum of
    weight/(k + rank) over the rankings it is in; on a tie the row met first goes first."""
    scores: dict[int, float] = {}
    rows: dict[int, SearchHit] = {}
    for weight, ranking in rankings:
        for rank, hit in enumerate(ranking, 1):
            scores[hit.key] = scores.get(hit.key, 0.0) + weight / (k + rank)
            rows.setdefault(hit.key, hit)
    return sorted(rows.values(), key=lambda hit: -scores[hit.key])


class MemorySearchService:
    def __init__(self, search: SearchRepository, semantic: SemanticRanking | None = None, *,
                 clock: Clock = utc_now, timezone: str = "UTC") -> None:
        self._search = search
        self._semantic = semantic
        self._clock = clock
        self._zone = zone(timezone)  # "yesterday" is the day before the person's today

    async def search(self, agent_id: int, query: str, limit: int = DEFAULT_LIMIT, source: str = "all",
                     exclude_message: int | None = None) -> dict[str, Any]:
        """The search result as the tool, the API and the commands show it.

        Raises SearchQueryRefused for a query `query_problem` refuses.
        """
        if (refused := query_problem(query)) is not None:
            raise refused
        query = " ".join(normalised(query).split())  # newlines and runs of spaces mean nothing here
        limit = max(1, min(int(limit), MAX_LIMIT))
        wanted = limit + (exclude_message is not None)
        terms = word_terms(query)
        if self._semantic is None:
            # The rankings, the choice between them and the hits' context: one hop to the database.
            hits, contexts = await self._search.together(
                lambda reads: self._found(reads, agent_id, query, terms, source, wanted, limit, exclude_message))
        else:
            depth = max(wanted, FUSION_DEPTH)
            # The query's vector is made while the index is read.
            nearby = asyncio.create_task(self._semantic.similar(agent_id, query, source, depth),
                                         name="semantic-search")
            try:
                pinned, ranked = await self._search.together(
                    lambda reads: self._lexical(reads, agent_id, query, terms, source, depth))
            except BaseException:
                nearby.cancel()
                raise
            if semantic := await nearby:
                ranked = [hit for hit in fused([(1.0, ranked), (SEMANTIC_WEIGHT, semantic)])
                          if hit.key not in pinned]
            hits = _chosen([*pinned.values(), *ranked], limit, exclude_message)
            contexts = await self._search.together(lambda reads: _contexts(reads, hits))
        results = [_result(hit, query, terms, contexts) for hit in hits]
        return {"agentId": agent_id, "query": query, "count": len(results), "results": results}

    def _found(self, reads: SearchReads, agent_id: int, query: str, terms: list[str], source: str,
               wanted: int, limit: int, exclude_message: int | None) -> tuple[list[SearchHit], Contexts]:
        """The lexical search's hits and their context, read together."""
        pinned, ranked = self._lexical(reads, agent_id, query, terms, source, wanted)
        hits = _chosen([*pinned.values(), *ranked], limit, exclude_message)
        return hits, _contexts(reads, hits)

    def _lexical(self, reads: SearchReads, agent_id: int, query: str, terms: list[str], source: str,
                 wanted: int) -> tuple[dict[int, SearchHit], list[SearchHit]]:
        """The exact-phrase hits (they rank first), and the word and substring hits after them."""
        pinned: dict[int, SearchHit] = {}
        hits: dict[int, SearchHit] = {}
        phrase = spaced(query[: PHRASE_CHARS[1]]).split()
        if 1 < len(phrase) <= PHRASE_TOKENS:  # the whole query word for word ranks first
            for hit in reads.words(agent_id, [" ".join(phrase)], source, wanted):
                pinned.setdefault(hit.key, hit)
        if terms and len(pinned) < wanted:
            found = self._words(reads, agent_id, query, terms, source, wanted * SPEAKER_DEPTH)
            for hit in speakers_first(query, found):
                if hit.key not in pinned:
                    hits.setdefault(hit.key, hit)
        if len(pinned) + len(hits) < wanted and PHRASE_CHARS[0] <= len(query) <= PHRASE_CHARS[1]:
            # Last, the query inside words ("penicil", part of a code): fills what is left.
            for hit in reads.substring(agent_id, query, source, wanted):
                if hit.key not in pinned:
                    hits.setdefault(hit.key, hit)
        return pinned, list(hits.values())

    def _words(self, reads: SearchReads, agent_id: int, query: str, terms: list[str], source: str,
               wanted: int) -> list[SearchHit]:
        """The rows with any of the query's words, best first; the dates it names ("in May
        2023", "周二", "yesterday") rank their rows up, and a query of nothing but dates finds
        those rows."""
        dates = query_dates(query, self._clock().astimezone(self._zone).date())
        if not dates.phrases:
            return reads.words(agent_id, terms, source, wanted)
        if not word_terms(dates.rest):
            return reads.words(agent_id, terms, source, wanted, dates=dates.phrases)
        return reads.words_on_dates(agent_id, terms, dates.phrases, source, wanted)


Contexts = dict[tuple[str, int], list[ContextMessage]]


def _chosen(hits: list[SearchHit], limit: int, exclude_message: int | None) -> list[SearchHit]:
    """The hits shown: the first `limit`, without the message the search was asked from."""
    if exclude_message is not None:
        hits = [hit for hit in hits if hit.message_id != exclude_message]
    return hits[:limit]


def _contexts(reads: SearchReads, hits: list[SearchHit]) -> Contexts:
    """The messages around each conversation hit."""
    messages = [(hit.conversation_id, hit.message_id) for hit in hits
                if hit.conversation_id is not None and hit.message_id is not None]
    return dict(zip(messages, reads.around(messages, CONTEXT_MESSAGES)))


def speaker(body: str) -> str | None:
    """Who said a group message: the "[Name] " the router stores before it; None for others."""
    end = body.find("] ", 1, 132) if body.startswith("[") else -1
    return body[1:end] if end > 1 else None


def names_in(query: str, name: str) -> bool:
    """Whether `query` names the person `name`: one of the name's words as a word of the query
    ("Anna" for "[Anna Lee]"), or a Chinese or Japanese name anywhere in it."""
    text = normalised(query).lower()
    words = set(_TOKEN.findall(text))
    for part in _TOKEN.findall(normalised(name).lower()):
        if _CJK_RUN.match(part):
            if part in text:
                return True
        elif part in words and part not in _STOP_EN and (len(part) > 1 or part.isdigit()):
            return True
    return False


def speakers_first(query: str, hits: list[SearchHit]) -> list[SearchHit]:
    """Word hits re-ranked so that what a person the query names said weighs SPEAKER_BOOST
    times its score: "what did Nate think of the ice cream" prefers Nate's own words."""
    named: dict[str, bool] = {}

    def score(hit: SearchHit) -> float:
        said_by = speaker(hit.body) if hit.source == "conversations" else None  # a note's "[x] " is a checkbox
        if said_by is None:
            return hit.score
        if said_by not in named:
            named[said_by] = names_in(query, said_by)
        return hit.score * SPEAKER_BOOST if named[said_by] else hit.score  # BM25: lower is better

    return sorted(hits, key=score)  # stable: a tie keeps the newer row first


def _result(hit: SearchHit, query: str, terms: list[str], contexts: Contexts) -> dict[str, Any]:
    result: dict[str, Any] = {"source": hit.source}
    if hit.source == "conversations":
        result["conversationId"] = hit.conversation_id
        result["messageId"] = hit.message_id
    else:
        result["filename"] = hit.filename
    result["time"] = hit.time
    result["snippet"] = snippet(hit.body, [query, *terms], SNIPPET_CHARS)
    if hit.conversation_id is not None and hit.message_id is not None:
        result["context"] = [_context(m) for m in contexts[(hit.conversation_id, hit.message_id)]]
    return result


def _context(message: ContextMessage) -> dict[str, Any]:
    text = " ".join(message.content.split())
    if len(text) > CONTEXT_CHARS:
        text = text[: CONTEXT_CHARS - 1].rstrip() + "…"
    return {"messageId": message.id, "role": message.role, "time": message.time, "text": text}


def snippet(body: str, needles: list[str], width: int) -> str:
    """About `width` characters of `body` around the first needle found (case-insensitive)."""
    text = " ".join(body.split())
    if len(text) <= width:
        return text
    at = -1
    for needle in needles:
        probe = needle
        if len(probe) > 5 and not _CJK_RUN.match(probe):
            probe = probe[: max(4, len(probe) - 3)]  # "running" is found as "runn": the index stems
        found = re.search(re.escape(probe), text, re.IGNORECASE) if probe else None
        if found:
            at = found.start()
            break
    start = max(0, (at if at >= 0 else 0) - width // 3)
    end = min(len(text), start + width)
    start = max(0, end - width)
    return ("…" if start > 0 else "") + text[start:end].strip() + ("…" if end < len(text) else "")
