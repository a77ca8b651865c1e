"""A real-model check of a group's memory: does each member's profile get that member's facts?

Usage: scripts/real-group-check [CACHE_DIR] [--locale en|zh-CN|both] [--runs N] [--threads N] [--temp T] [--keep]

1. Reuses scripts/real-model-check's llama-server build and Qwen2.5-Coder-1.5B weights
   under CACHE_DIR (building and downloading them first when they are not there yet).
2. For each locale: opens matebot's runtime on a fresh database with llama-server as its
   model, routes a Telegram group message to find the group's own agent and conversation,
   and stores a group chat as the router stores it: three people each say two things about
   themselves, with small talk, assistant replies, and one remark about another member.
3. Runs the memory extraction once (with the service's own retries) and reads each member's
   profile (people/telegram-<id>.md): each fact is right (only in its speaker's profile),
   wrong (in another member's) or missing; and the remark must not reach the profile of the
   member it is about (it belongs to MEMORY.md).
4. Prints one JSON line per locale: facts, right, wrong, missing, remark_misattributed,
   seconds, model, extraction_requests and extraction_prompts_repeated (counted by
   scripts/recording_proxy.py between matebot and llama-server), and details. `--runs N`
   repeats every locale N times and ends with one summary line: right and wrong of all facts.
   The prompt, the model's replies and the files written go to
   CACHE_DIR/logs/last-group-<locale>.md. Exit 1 only when something could not run.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a file: bot.* and memory.* come from the project
    sys.path.insert(0, str(ROOT))

from bot.core.config import parse_config
from bot.llm import AnthropicClient
from bot.app.runtime import open_runtime
from bot.storage.inspection import ReadOnlyDatabase
from channels.base import InboundMessage
from memory.extraction.people_profiles import profile_filename
from memory.extraction.summarization import AnalysisOutcome
from memory.workspace.service import MEMORY_FILE
from real_lane import (
    CheckError, Lane, RecordingClient, add_keep, free_port, lane_parser, print_result, run_lane, say,
    write_exchanges,
)
from real_llama import MODEL_NAME, daemon_config, llama_arguments, serve_in_process
from real_model_check import extraction_stats
from recording_proxy import RecordingProxy

# The group prompt lists every member's profile budget as reply room: three members at the
# default 2000 characters each ask for up to ~12k tokens in zh-CN (one token a character),
# more than the other lane's 8k context holds.
CONTEXT = 16384
LOCALES = ("en", "zh-CN")


# -- the conversation and its score ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Speaker:
    key: str
    name: str
    sender_id: str  # a Telegram user id


@dataclass(frozen=True, slots=True)
class Fact:
    """Something `owner` said about themselves; `pattern` finds it in a profile (case-insensitive)."""
    label: str
    owner: str
    pattern: str


@dataclass(frozen=True, slots=True)
class Remark:
    """What `speaker` said about `about`: it must not land in `about`'s profile."""
    speaker: str
    about: str
    pattern: str


@dataclass(frozen=True, slots=True)
class Scenario:
    title: str
    speakers: tuple[Speaker, ...]
    lines: tuple[tuple[str, str], ...]  # (speaker key, or "assistant"; text), in order
    facts: tuple[Fact, ...]
    remark: Remark


ASSISTANT = "assistant"

EN = Scenario(
    title="Weekend crew",
    speakers=(Speaker("alice", "Alice", "1101"), Speaker("bob", "Bob", "1102"), Speaker("chen", "Chen", "1103")),
    lines=(
        ("alice", "Morning everyone! Finally Friday."),
        (ASSISTANT, "Good morning, Alice! Happy Friday."),
        ("bob", "Hey all. Quick intro for the bot: I'm Bob, and I work as a carpenter, I build kitchen furniture."),
        (ASSISTANT, "Nice to meet you, Bob!"),
        ("alice", "Same here then: I'm a nurse, I do night shifts at the children's hospital."),
        (ASSISTANT, "Night shifts are hard work. Thanks for what you do, Alice."),
        ("chen", "Hi, I'm Chen. I'm an airline pilot, mostly short routes around Europe."),
        (ASSISTANT, "Nice to meet you, Chen!"),
        ("alice", "And I live in Porto, right by the river."),
        (ASSISTANT, "Lovely spot!"),
        ("bob", "Anyone watching the match tonight?"),
        ("chen", "Maybe, if I'm not too tired."),
        (ASSISTANT, "Enjoy the game, whoever watches!"),
        ("bob", "At home I have a grey parrot called Kiwi who never stops talking."),
        (ASSISTANT, "A talkative companion, then!"),
        ("chen", "My big hobby is rock climbing, I go to the gym three times a week."),
        (ASSISTANT, "That keeps you fit!"),
        ("alice", "Ha, and Chen is terrified of spiders, you should have seen him on our camping trip!"),
        (ASSISTANT, "Sounds like a memorable trip!"),
        ("chen", "Okay, okay. Anyway, have a good weekend all!"),
        (ASSISTANT, "Have a great weekend, everyone!"),
    ),
    facts=(
        Fact("alice.job", "alice", r"nurs"),
        Fact("alice.city", "alice", r"porto"),
        Fact("bob.job", "bob", r"carpent"),
        Fact("bob.pet", "bob", r"parrot|kiwi"),
        Fact("chen.job", "chen", r"pilot"),
        Fact("chen.hobby", "chen", r"climb"),
    ),
    remark=Remark("alice", "chen", r"spider"),
)

ZH = Scenario(
    title="周末小组",
    speakers=(Speaker("wang", "王芳", "2201"), Speaker("li", "李强", "2202"), Speaker("chen", "陈明", "2203")),
    lines=(
        ("wang", "大家早上好！终于到周五了。"),
        (ASSISTANT, "早上好，王芳！周五快乐。"),
        ("li", "大家好。先给机器人介绍一下：我叫李强，是个木匠，专门做厨房家具。"),
        (ASSISTANT, "很高兴认识你，李强！"),
        ("wang", "那我也说一下：我是儿童医院的护士，经常上夜班。"),
        (ASSISTANT, "夜班很辛苦，谢谢你的付出，王芳。"),
        ("chen", "你好，我是陈明。我是航空公司的飞行员，主要飞国内短途航线。"),
        (ASSISTANT, "很高兴认识你，陈明！"),
        ("wang", "对了，我住在成都，就在锦江边上。"),
        (ASSISTANT, "那里风景很好！"),
        ("li", "今晚有人看球赛吗？"),
        ("chen", "看情况，不太累的话就看。"),
        (ASSISTANT, "祝看球的朋友们看得开心！"),
        ("li", "我家里养了一只灰鹦鹉，叫奇异果，整天说个不停。"),
        (ASSISTANT, "真是个爱聊天的伙伴！"),
        ("chen", "我最大的爱好是攀岩，每周去三次岩馆。"),
        (ASSISTANT, "这个爱好很锻炼身体！"),
        ("wang", "哈哈，陈明特别怕蜘蛛，上次露营的时候你们真该看看他的样子！"),
        (ASSISTANT, "听起来是一次难忘的露营！"),
        ("chen", "好啦好啦。总之，祝大家周末愉快！"),
        (ASSISTANT, "大家周末愉快！"),
    ),
    facts=(
        Fact("wang.job", "wang", r"护士|nurs"),
        Fact("wang.city", "wang", r"成都|chengdu"),
        Fact("li.job", "li", r"木匠|carpent"),
        Fact("li.pet", "li", r"鹦鹉|奇异果|parrot"),
        Fact("chen.job", "chen", r"飞行员|机长|pilot"),
        Fact("chen.hobby", "chen", r"攀岩|climb"),
    ),
    remark=Remark("wang", "chen", r"蜘蛛|spider"),
)

SCENARIOS = {"en": EN, "zh-CN": ZH}


@dataclass(frozen=True, slots=True)
class Score:
    facts: int
    right: int
    wrong: int
    missing: int
    remark_misattributed: bool
    per_fact: dict[str, str] = field(default_factory=dict)  # label -> right | wrong | missing

    def as_json(self) -> dict[str, Any]:
        return {"facts": self.facts, "right": self.right, "wrong": self.wrong, "missing": self.missing,
                "remark_misattributed": self.remark_misattributed, "per_fact": self.per_fact}


def score(scenario: Scenario, profiles: Mapping[str, str]) -> Score:
    """Each fact: `wrong` when it is in another member's profile (even if also in its own),
    `right` when it is only in its speaker's, `missing` when in none; `profiles` by speaker key."""
    def has(key: str, pattern: str) -> bool:
        return re.search(pattern, profiles.get(key, ""), re.IGNORECASE) is not None

    verdicts: dict[str, str] = {}
    for fact in scenario.facts:
        elsewhere = any(has(s.key, fact.pattern) for s in scenario.speakers if s.key != fact.owner)
        verdicts[fact.label] = "wrong" if elsewhere else "right" if has(fact.owner, fact.pattern) else "missing"
    counts = {v: sum(1 for x in verdicts.values() if x == v) for v in ("right", "wrong", "missing")}
    return Score(len(scenario.facts), counts["right"], counts["wrong"], counts["missing"],
                 has(scenario.remark.about, scenario.remark.pattern), verdicts)


# -- one locale against the model ------------------------------------------------------


async def run_locale(scenario: Scenario, locale: str, base_url: str, work: Path, dump: Path) -> dict[str, Any]:
    async with RecordingProxy(base_url) as proxy:
        result = await _run_locale(scenario, locale, proxy.url, work, dump)
    return {**result, **proxy.summary()}


async def _run_locale(scenario: Scenario, locale: str, base_url: str, work: Path, dump: Path) -> dict[str, Any]:
    tree = daemon_config(work, base_url, free_port())
    tree["mate"]["locale"] = locale
    tree["mate"]["api"] = {"enabled": False}
    config = parse_config(tree, source="real-group-check", environ={})
    channel, group_id = "telegram", "-1009001"
    names = {s.key: s for s in scenario.speakers}
    async with AnthropicClient(config.mate.llm) as client:
        recorder = RecordingClient(client)
        async with open_runtime(config, llm=recorder) as rt:
            assert rt.memory_services is not None
            first = scenario.speakers[0]
            # The router decides the agent (a group's own, per-chat) and opens the group's conversation.
            probe = InboundMessage(channel=channel, chat_id=group_id, sender_id=first.sender_id,
                                   sender_name=first.name, text="", is_direct=False, chat_title=scenario.title)
            agent_id = await rt.router.agent_for(probe)
            conversation = await rt.router.conversation_for(probe, agent_id)
            if not conversation.is_group:
                raise CheckError("the group's conversation is not marked as a group")
            repos = rt.core.repos
            for who, text in scenario.lines:
                if who == ASSISTANT:
                    await repos.messages.add_many(conversation.id, [(ASSISTANT, text, rt.tokens.count_text(text))])
                else:
                    speaker = names[who]
                    stored = f"[{speaker.name}] {text}"  # as the router stores a group message
                    await repos.messages.add_user(conversation.id, stored, rt.tokens.count_text(stored),
                                                  speaker.sender_id, speaker.name)
            say(f"{locale}: {len(scenario.lines)} messages stored in {conversation.id} (agent {agent_id}); "
                "extracting")
            started = time.monotonic()
            outcome = await rt.memory_services.summarization.analyze_and_update_memory(agent_id, conversation.id)
            seconds = time.monotonic() - started
            files = {s.key: (await rt.core.workspace.read_text(agent_id, profile_filename(channel, s.sender_id)))[0]
                     for s in scenario.speakers}
            shared = (await rt.core.workspace.read_text(agent_id, MEMORY_FILE))[0]
            written = {name: (await rt.core.workspace.read_text(agent_id, name))[0] for name in outcome.files}
        with ReadOnlyDatabase(Path(config.mate.database.path)) as database:
            runs = extraction_stats(database)
    result = score(scenario, files)
    remark = re.compile(scenario.remark.pattern, re.IGNORECASE)
    remark_in = sorted(name for name, text in {**written, MEMORY_FILE: shared}.items() if remark.search(text))
    replies = [e for e in recorder.exchanges if "reply" in e]
    write_dump(dump, locale, outcome, recorder.exchanges, written)
    say(f"{locale}: extraction {outcome.status} in {seconds:.1f} s: {outcome.reason[:200]}")
    return {
        "locale": locale,
        **{k: v for k, v in result.as_json().items() if k != "per_fact"},
        "seconds": round(seconds, 1),
        "model": MODEL_NAME,
        "per_fact": result.per_fact,
        "remark_in": remark_in,
        "extraction": outcome.status,
        "extraction_reason": outcome.reason[:300],
        "attempts": runs["extraction_runs"],
        "attempt_errors": runs["extraction_errors"],  # why a try before the last failed (bad JSON...)
        "model_calls": len(recorder.exchanges),
        "prompt_tokens": replies[-1]["input_tokens"] if replies else None,
        "output_tokens": replies[-1]["output_tokens"] if replies else None,
        "files_written": list(outcome.files),
    }


def write_dump(path: Path, locale: str, outcome: AnalysisOutcome, exchanges: list[dict[str, Any]],
               written: Mapping[str, str]) -> None:
    """The whole story of one locale's run, for a look after a bad score."""
    write_exchanges(path, f"# real-group-check, {locale}: {outcome.status}: {outcome.reason}", exchanges,
                    files=written.items())


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals over every run and locale, in the terms of SPEC S34's targets (right of all
    facts, wrong ones, repeated extraction prompts)."""
    def added(key: str) -> int:
        return sum(int(r.get(key) or 0) for r in results)

    facts, right, wrong = added("facts"), added("right"), added("wrong")
    return {"summary": "real-group-check", "runs": len(results),
            "locales": sorted({str(r.get("locale")) for r in results}),
            "facts": facts, "right": right, "wrong": wrong, "missing": added("missing"),
            "remark_misattributed": sum(bool(r.get("remark_misattributed")) for r in results),
            "extraction_requests": added("extraction_requests"),
            "extraction_prompts_repeated": added("extraction_prompts_repeated"),
            "targets_met": {"right_three_quarters": facts > 0 and right * 4 >= facts * 3,  # 18 of 24
                            "wrong_at_most_1_per_24": wrong * 24 <= max(facts, 24),
                            "extraction_prompts_repeated_0": added("extraction_prompts_repeated") == 0}}


# -- main ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = lane_parser("scripts/real-group-check", __doc__)
    parser.add_argument("--locale", choices=[*LOCALES, "both"], default="both",
                        help="the conversation's language and prompts (default: both, one JSON line each)")
    parser.add_argument("--runs", type=int, default=1,
                        help="runs per locale, each on a fresh database; with more than one line, a summary "
                             "line follows (default 1)")
    llama_arguments(parser)
    add_keep(parser)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    def check(lane: Lane) -> None:
        base_url, server = serve_in_process(lane, args.threads, args.temp, CONTEXT)
        results: list[dict[str, Any]] = []
        for locale in LOCALES if args.locale == "both" else (args.locale,):
            for run in range(1, args.runs + 1):
                dump = lane.logs / f"last-group-{locale}.md"
                work = lane.work / (locale if args.runs == 1 else f"{locale}-{run}")
                result = asyncio.run(run_locale(SCENARIOS[locale], locale, base_url, work, dump))
                result.update(server, run=run)
                print_result(result)
                results.append(result)
                say(f"{locale}: prompt, replies and files in {dump}")
        if len(results) > 1:
            print_result(summary(results))

    return run_lane(args.cache_dir, "matebot-real-group-", check, keep=args.keep, in_process=True,
                    last_logs=lambda work: [(log, f"last-group-{log.name}") for log in (work / "logs").glob("*")])


if __name__ == "__main__":
    sys.exit(main())
