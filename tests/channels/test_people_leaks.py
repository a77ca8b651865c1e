"""People end to end: the real Telegram and Discord adapters on their fakes, several people at once.

Every person tells the bot a secret of their own; a memory model that keeps everything it
is shown writes it to memory. Then each person talks again, and the test reads what the
model was sent for each of them: their own secret is there (the control), nobody else's
is — in direct chats, linked accounts, the owner on both platforms, a group, the memory
tool, search, /memory commands and the web API.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.app.api.server import ApiServer
from bot.app.runtime import Runtime
from memory.recall.tool import SEARCH_TOOL
from memory.workspace.tool import READ_TOOL
from tests.support.eventually import eventually
from tests.support.runtime import discord_channel, running, telegram_channel
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, Script, TextReply, ToolUseReply, is_memory_extraction
from tests.support.fakes.discord import FakeDiscord
from tests.support.fakes.telegram import FakeTelegram

OWNER_TG, ANA_TG, SAM_TG, CHEN_TG = 42, 7, 8, 9
OWNER_DC, SAM_DC = "70", "80"
GROUP = -1001
SECRETS = {
    "owner-tg": "OWNERTG5521", "owner-dc": "OWNERDC6632", "ana": "ANADM7743", "sam": "SAMDM8854",
    "ana-group": "ANAGROUP1165", "sam-group": "SAMGROUP2276", "chen-group": "CHENGROUP3387",
}
_TOKEN = re.compile(r"[A-Z]+[0-9]{4}")


def _text(content: Any) -> str:
    return content if isinstance(content, str) else " ".join(
        str(b.get("text", b.get("content", ""))) for b in content if isinstance(b, dict))


def _kept(prompt: str, tag: str) -> str:
    """What a <profile ...> block of the prompt holds now ("" when empty)."""
    found = re.search(rf"<profile{tag}>\n(.*?)\n</profile>", prompt, re.S)
    held = found.group(1).strip() if found else ""
    return "" if held in ("(empty)", "") else held + "\n"


def keep_everything(recorded: RecordedRequest) -> Script | None:
    """The memory model: every line a person said is added to their profile (a group member's, by
    their number), so whatever leaks would show. Chat requests fall through to the queue."""
    system = json.dumps(recorded.body.get("system", ""))
    if "should_update" not in system:
        return None
    prompt = _text(recorded.body["messages"][0]["content"])
    transcript = prompt.split("<transcript>", 1)[1].split("</transcript>", 1)[0]
    if "people_updates" in system:
        said: dict[str, list[str]] = {}
        for ref, words in re.findall(r"^(P\d+) [^:]+: (.*)$", transcript, re.M):
            said.setdefault(ref, []).append(words)
        return TextReply(json.dumps({"should_update": True, "reason": "kept", "daily_entry": "",
                                     "people_updates": {ref: _kept(prompt, f' ref="{ref}"') + "\n".join(
                                         f"- {w}" for w in lines) for ref, lines in said.items()}}))
    lines = re.findall(r"^User: (.*)$", transcript, re.M)
    return TextReply(json.dumps({"should_update": True, "reason": "kept", "daily_entry": "",
                                 "profile_update": (_kept(prompt, "") or "# Profile\n") + "\n".join(
                                     f"- {w}" for w in lines)}))


@dataclass
class World:
    rt: Runtime
    llm: FakeAnthropic
    tg: FakeTelegram
    dc: FakeDiscord
    api: str

    def chats(self) -> list[RecordedRequest]:
        return [r for r in self.llm.requests
                if r.path == "/v1/messages" and not is_memory_extraction(r.body)]

    def request_with(self, marker: str) -> str:
        """Everything the model was sent in the first chat request whose last message holds `marker`."""
        for recorded in self.chats():
            if marker in json.dumps(recorded.body["messages"][-1], ensure_ascii=False):
                return json.dumps(recorded.body, ensure_ascii=False)
        raise AssertionError(f"no chat request with {marker}")

    async def until(self, done: Callable[[], bool], what: str, timeout: float = 20) -> None:
        await eventually(done, what, timeout, poll=0.02)

    async def answered(self, marker: str) -> None:
        await self.until(lambda: any(marker in json.dumps(r.body["messages"][-1]) for r in self.chats()), marker)

    async def extract_all(self) -> None:
        services = self.rt.memory_services
        assert services is not None
        for item in await self.rt.core.repos.conversations.recent_activity(None):
            c = item.conversation
            outcome = await services.summarization.analyze_and_update_memory(c.agent_id, c.id)
            assert outcome.status == "completed", (c.id, outcome)


@asynccontextmanager
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with FakeAnthropic() as llm, FakeTelegram() as tg, FakeDiscord() as dc:
        llm.responder = keep_everything
        async with running(
            tmp_path, llm, memory_worker=True,
            llm={"api-key": "k", "base-url": llm.url, "max-retries": 0, "stream": False},
            memory={"min-messages-for-summarize": 0, "min-user-message-length": 0},
            api={"port": 0, "token": "api-token-1"},
            people=[{"name": "Sam", "ids": [f"telegram:{SAM_TG}", f"discord:{SAM_DC}"]}],
            channels={
                "telegram": {"enabled": True, "token": tg.token, "base-url": tg.base_url, "admins": [str(OWNER_TG)],
                             "allowed-users": [str(ANA_TG), str(SAM_TG), str(CHEN_TG)], "group-policy": "open"},
                "discord": {"enabled": True, "token": "TOKEN", "admins": [OWNER_DC], "allowed-users": [SAM_DC],
                            "allowed-guilds": ["100"], "api-base-url": dc.api_base, "gateway-url": dc.gateway_url},
            },
        ) as rt, ApiServer(rt, rt.core.config.mate.api, "api-token-1") as server, \
                telegram_channel(rt, access=rt.access.telegram), \
                discord_channel(rt, dc, access=rt.access.discord):
            yield World(rt, llm, tg, dc, f"http://127.0.0.1:{server.port}")


def others(*mine: str) -> list[str]:
    return [secret for name, secret in SECRETS.items() if name not in mine]


async def first_round(w: World) -> None:
    w.tg.push_text(f"my code is {SECRETS['owner-tg']}", chat_id=OWNER_TG, user_id=OWNER_TG, first_name="Olga")
    w.tg.push_text(f"my code is {SECRETS['ana']}", chat_id=ANA_TG, user_id=ANA_TG, first_name="Ana")
    w.tg.push_text(f"my code is {SECRETS['sam']}", chat_id=SAM_TG, user_id=SAM_TG, first_name="Sammy")
    await w.dc.send_dm(f"my code is {SECRETS['owner-dc']}", author_id=OWNER_DC, username="olga")
    for user, name, secret in ((ANA_TG, "Ana", "ana-group"), (SAM_TG, "Sammy", "sam-group"),
                               (CHEN_TG, "Chen", "chen-group")):
        w.tg.push_text(f"@mate_bot I am {SECRETS[secret]}", chat_id=GROUP, user_id=user, first_name=name,
                       chat_type="group")
        await w.answered(SECRETS[secret])  # one after another: the group's order is the test's
    for secret in ("owner-tg", "ana", "sam", "owner-dc"):
        await w.answered(SECRETS[secret])
    await w.until(lambda: len(w.tg.sent) >= 6, "the Telegram replies")
    await w.extract_all()


async def test_nobody_reads_another_persons_memory_in_any_chat(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await first_round(w)
        w.tg.push_text("round two from Ana", chat_id=ANA_TG, user_id=ANA_TG, first_name="Ana")
        await w.dc.send_dm("round two from Sam on Discord", author_id=SAM_DC, username="sam")
        await w.dc.send_dm("round two from Olga on Discord", author_id=OWNER_DC, username="olga")
        w.tg.push_text("@mate_bot round two from Chen", chat_id=GROUP, user_id=CHEN_TG, first_name="Chen",
                       chat_type="group")
        for marker in ("from Ana", "from Sam on Discord", "from Olga on Discord", "from Chen"):
            await w.answered(marker)
        ana, sam, owner, group = (w.request_with(m) for m in (
            "round two from Ana", "round two from Sam", "round two from Olga", "round two from Chen"))
        people = {p.name: p for p in await w.rt.core.people.list()}

    assert SECRETS["ana"] in ana and not [s for s in others("ana") if s in ana]
    # Sam's Telegram and Discord accounts are one person: what Sam said on Telegram answers on Discord.
    assert SECRETS["sam"] in sam and not [s for s in others("sam") if s in sam]
    # The owner is one person on both platforms, with agent 1.
    assert SECRETS["owner-tg"] in owner and SECRETS["owner-dc"] in owner
    assert not [s for s in others("owner-tg", "owner-dc") if s in owner]
    # The group shows its members' profiles, never anyone's direct-chat memory.
    assert all(SECRETS[s] in group for s in ("ana-group", "sam-group", "chen-group"))
    assert not [s for s in others("ana-group", "sam-group", "chen-group") if s in group]
    assert set(people) == {"Owner", "Sam", "Ana", "Chen"}  # Chen, met in the group only, is a person too
    assert people["Sam"].accounts == (f"discord:{SAM_DC}", f"telegram:{SAM_TG}") and people["Sam"].agent_id not in (None, 1)


async def test_the_memory_tool_search_commands_and_web_api_stay_with_their_person(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await first_round(w)
        # Sam's model reads PROFILE.md and searches for Ana's code: both answer from Sam's memory only.
        w.llm.push(ToolUseReply(READ_TOOL, {"filename": "PROFILE.md"}))
        w.llm.push(ToolUseReply(SEARCH_TOOL, {"query": f"{SECRETS['ana']} code"}))
        w.llm.push(ToolUseReply(SEARCH_TOOL, {"query": f"{SECRETS['sam']}"}))  # the control: Sam's own is found
        w.llm.push(TextReply("done"))
        await w.dc.send_dm("what do you know, tools please", author_id=SAM_DC, username="sam")
        await w.until(lambda: len([r for r in w.chats() if "tools please" in json.dumps(r.body)]) >= 4, "tool rounds")
        # What each tool answered, without the search's echo of the query Sam's model wrote.
        rounds = [r for r in w.chats() if "tools please" in json.dumps(r.body)][1:]
        answers = [json.loads(r.body["messages"][-1]["content"][0]["content"]) for r in rounds]
        tool_rounds = [json.dumps({k: v for k, v in a.items() if k != "query"}, ensure_ascii=False)
                       for a in answers]
        # Ana asks for the memory commands: she may read her own agent's files, not search.
        w.tg.push_text("/memory show profile", chat_id=ANA_TG, user_id=ANA_TG, first_name="Ana")
        w.tg.push_text(f"/memory search {SECRETS['sam']}", chat_id=ANA_TG, user_id=ANA_TG, first_name="Ana")
        await w.until(lambda: sum(1 for s in w.tg.sent if s["chat_id"] == ANA_TG) >= 3, "Ana's command answers")
        ana_sees = [s["text"] for s in w.tg.sent if s["chat_id"] == ANA_TG]
        not_admin = w.rt.core.prompts.text("not_admin")
        # The owner's own search finds the owner's words, not Ana's.
        w.tg.push_text(f"/memory search {SECRETS['ana']}", chat_id=OWNER_TG, user_id=OWNER_TG, first_name="Olga")
        w.tg.push_text(f"/memory search {SECRETS['owner-tg']}", chat_id=OWNER_TG, user_id=OWNER_TG,
                       first_name="Olga")
        await w.until(lambda: sum(1 for s in w.tg.sent if s["chat_id"] == OWNER_TG) >= 3, "the owner's searches")
        owner_sees = [s["text"] for s in w.tg.sent if s["chat_id"] == OWNER_TG][-2:]
        # The web chat is the owner's: agent 1.
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer api-token-1"}) as http:
            async with http.post(f"{w.api}/api/v1/chat/1", json={"message": "web round from Olga"}) as response:
                assert response.status == 200, await response.text()
            async with http.get(f"{w.api}/api/v1/people") as response:
                listed = (await response.json())["data"]
        web = w.request_with("web round from Olga")

    assert len(tool_rounds) == 3
    assert SECRETS["sam"] in tool_rounds[0] and not [s for s in others("sam") if s in tool_rounds[0]]
    assert not [s for s in others("sam") if s in tool_rounds[1]]
    assert SECRETS["sam"] in tool_rounds[2] and not [s for s in others("sam") if s in tool_rounds[2]]
    # Expected value changed on purpose (S33): a person reads what is kept about them in their
    # own direct chat — her own agent's PROFILE.md, with nobody else's secrets in it.
    assert ana_sees[1] != not_admin and SECRETS["ana"] in ana_sees[1]
    assert not [s for s in others("ana") if s in ana_sees[1]]
    assert ana_sees[2] == not_admin
    # The two answers may reach the chat in either order (each is sent once its turn is done).
    assert not [text for text in owner_sees if SECRETS["ana"] in text]
    assert [text for text in owner_sees if SECRETS["owner-tg"] in text]
    assert SECRETS["owner-tg"] in web and not [s for s in others("owner-tg", "owner-dc") if s in web]
    by_name = {p["name"]: p for p in listed["people"]}
    assert by_name["Sam"]["accounts"] == [f"discord:{SAM_DC}", f"telegram:{SAM_TG}"]
    assert [p["personId"] for p in listed["people"] if p["owner"]] == [1]


@pytest.mark.parametrize("linked", [True, False])
async def test_whoami_names_the_person_and_the_agent(tmp_path: Path, linked: bool) -> None:
    async with world(tmp_path) as w:
        w.tg.push_text("/whoami", chat_id=SAM_TG if linked else CHEN_TG, user_id=SAM_TG if linked else CHEN_TG,
                       first_name="Sammy" if linked else "Chen")
        await w.dc.send_dm("/whoami", author_id=OWNER_DC, username="olga")
        await w.until(lambda: len(w.tg.sent) >= 1 and len(w.dc.sent_messages) >= 1, "the answers")
        telegram, discord_answer = w.tg.sent[0]["text"], w.dc.sent_messages[0]["content"]
        listed = {p.name: p for p in await w.rt.core.people.list()}
    person = listed["Sam" if linked else "Chen"]
    assert person.agent_id not in (None, 1)
    assert telegram == f"You are {person.name} (person {person.id}); agent {person.agent_id} (Mate) answers here."
    assert discord_answer.startswith("You are Owner, the owner (person 1); agent 1 (Mate)")
