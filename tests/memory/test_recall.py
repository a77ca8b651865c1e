"""Search over conversations and memory files: natural questions, CJK, scoping, an index kept current (SPEC S22)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app.core import Core, open_core
from memory.recall.search import MAX_QUERY_CHARS, MemorySearchService, SearchQueryRefused, names_in, speaker, word_terms
from tests.support.config import make_config, pinned_clock
from tests.support.postgres import Cluster
from tests.support.storage_backends import BACKENDS, storage_url
from tests.support.recall_env import CHATTER, talk


@pytest.fixture(params=BACKENDS)
async def core(request: pytest.FixtureRequest, tmp_path: Path, postgres_cluster: Cluster | str) -> AsyncIterator[Core]:
    """The search's contract: every test here runs on SQLite and on PostgreSQL."""
    async with storage_url(request.param, postgres_cluster) as url:
        config = make_config(tmp_path, agents=[{"id": 1, "name": "Mate"}, {"id": 2, "name": "Group"}],
                             storage={"url": url})
        async with open_core(config, clock=pinned_clock()) as opened:
            await opened.agents.ensure_configured()
            yield opened


async def group_talk(core: Core, conversation: str, agent_id: int, *texts: str) -> list[int]:
    """Messages of people in a group: every turn a user turn."""
    await core.repos.conversations.create(conversation, agent_id=agent_id, channel="telegram",
                                          chat_key=conversation, trigger_source="channel")
    return [await core.repos.messages.add(conversation, "user", text, 5) for text in texts]


def search(core: Core) -> MemorySearchService:
    return MemorySearchService(core.repos.search)


async def test_a_question_in_other_words_finds_the_fact_with_its_context(core: Core) -> None:
    ids = await talk(core, "console:me", 1, *CHATTER)
    result = await search(core).search(1, "Where does my sister live now?")

    assert result["agentId"] == 1 and result["query"] == "Where does my sister live now?"
    top = result["results"][0]
    assert top["source"] == "conversations" and top["messageId"] == ids[4]
    assert top["conversationId"] == "console:me" and "Lisbon" in top["snippet"] and top["time"]
    assert [c["messageId"] for c in top["context"]] == ids[2:4] + ids[5:7]
    assert result["count"] == len(result["results"]) <= 5


async def test_stems_find_other_forms_of_a_word(core: Core) -> None:
    await talk(core, "console:me", 1, "I have been running every morning before work.", "Nice!")
    result = await search(core).search(1, "does she run?")
    assert "running" in result["results"][0]["snippet"]


async def test_chinese_and_japanese_are_found_by_their_words(core: Core) -> None:
    await talk(core, "console:me", 1, "今天下雨了。", "记得带伞。", "我最喜欢的水果是芒果。", "好的，记住了。",
               "東京の渋谷に住んでいます。", "いいですね。")
    fruit = await search(core).search(1, "我喜欢吃什么水果？")
    home = await search(core).search(1, "どこに住んでいますか")

    assert "芒果" in fruit["results"][0]["snippet"]
    assert "渋谷" in home["results"][0]["snippet"]
    assert {"喜欢", "水果"} <= set(word_terms("我喜欢吃什么水果？")) and "什么" not in word_terms("我喜欢吃什么水果？")
    assert "过敏" in word_terms("我对什么东西过敏？")  # a stop character inside a word keeps the word


async def test_an_exact_phrase_ranks_first(core: Core) -> None:
    await talk(core, "console:me", 1, "door door door code code: the garage door code and the door code again",
               "ok", "the blue door code is 4471", "noted")
    result = await search(core).search(1, "blue door code")
    assert result["results"][0]["snippet"] == "the blue door code is 4471"


async def test_an_agent_sees_only_its_own_conversations_and_files(core: Core) -> None:
    await talk(core, "console:me", 1, "My passport number is in the blue folder.", "Noted.")
    await talk(core, "tg:-100", 2, "[Bob] the group's passport folder is red", "ok")
    await core.workspace.write(2, "MEMORY.md", "- passport renewal due in May\n")

    mine = await search(core).search(1, "passport")
    theirs = await search(core).search(2, "passport")

    assert {r.get("conversationId") for r in mine["results"]} == {"console:me"}
    assert {r.get("conversationId") or r.get("filename") for r in theirs["results"]} == {"tg:-100", "MEMORY.md"}


async def test_the_index_follows_edits_deletes_and_new_conversations(core: Core) -> None:
    service = search(core)
    await core.workspace.write(1, "memory/2026-11-01.md", "- Talked about the trip to Kyoto.\n")
    assert (await service.search(1, "Kyoto"))["count"] == 1
    await core.workspace.write(1, "memory/2026-11-01.md", "- Talked about the trip to Osaka.\n", expected_version=1)
    assert (await service.search(1, "Kyoto"))["count"] == 0
    assert (await service.search(1, "Osaka"))["results"][0]["filename"] == "memory/2026-11-01.md"
    await core.workspace.delete(1, "memory/2026-11-01.md")
    assert (await service.search(1, "Osaka"))["count"] == 0

    [first, _] = await talk(core, "console:me", 1, "The plumber comes on Tuesday.", "Got it.")
    await core.repos.conversations.archive("console:me")  # what /new does
    await talk(core, "console:me:2", 1, "hello again", "hi")
    hits = (await service.search(1, "plumber"))["results"]
    assert hits[0]["messageId"] == first  # an earlier conversation is still found (its reply may follow)
    await core.db.execute("DELETE FROM mate_message WHERE id = ?", (first,))
    assert (await service.search(1, "plumber"))["count"] == 0


@pytest.mark.parametrize("query", [
    '"', '" OR 1=1 --', "NEAR(a b)", "*", "^start", "-minus", "a:b", "(((", "'; DROP TABLE mate_message; --",
    "🙂🙂🙂", "the of and", "x" * MAX_QUERY_CHARS, " ".join(["word"] * 200), "tab\tand\nnew line\r",
])
async def test_hostile_queries_answer_without_errors(core: Core, query: str) -> None:
    await talk(core, "console:me", 1, "a normal message about words", "ok")
    result = await search(core).search(1, query)
    assert result["count"] == len(result["results"])
    assert (await core.db.fetchone("SELECT COUNT(*) FROM mate_message"))[0] == 2


@pytest.mark.parametrize(("query", "reason"), [
    ("a\x00b", "U+0000"), ("abc\x00", "U+0000"), ("\x00\x01", "U+0000"), ("bell\x07", "U+0007"),
    ("del\x7f", "U+007F"), ("c1\x85x", "U+0085"), ("x" * (MAX_QUERY_CHARS + 1), f"at most {MAX_QUERY_CHARS}"),
    (" ".join(["word"] * 5_000), "24999 characters"),
])
async def test_control_characters_and_long_queries_are_refused_with_the_reason(core: Core, query: str,
                                                                              reason: str) -> None:
    await talk(core, "console:me", 1, "abc a normal message", "ok")
    with pytest.raises(SearchQueryRefused) as refused:
        await search(core).search(1, query)
    assert reason in str(refused.value)
    assert reason in refused.value.text(core.prompts)


async def test_the_migration_indexes_what_was_stored_before(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with open_core(config, clock=pinned_clock()) as core:
        await core.agents.ensure_configured()
        await talk(core, "console:me", 1, "The boat is called Marlin.", "Nice name.")
    with sqlite3.connect(config.mate.database.path) as conn:  # back to the schema before search
        for name in ("tr_search_message_insert", "tr_search_message_update", "tr_search_message_delete",
                     "tr_piece_index_insert", "tr_piece_index_delete", "tr_piece_file_insert",
                     "tr_piece_file_append", "tr_piece_file_update", "tr_piece_file_delete",
                     "tr_search_fact_insert", "tr_search_fact_delete"):
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TABLE mate_message_fact")
        conn.execute("DROP TABLE mate_file_piece")
        conn.execute("DROP TABLE mate_search_text")
        conn.execute("DROP TABLE mate_search_trigram")
        conn.execute("DROP TABLE mate_person_account")  # and what later versions added
        conn.execute("DROP TABLE mate_person")
        conn.execute("ALTER TABLE mate_conversation DROP COLUMN is_group")
        conn.execute("DELETE FROM schema_version WHERE version >= 6")
    async with open_core(config, clock=pinned_clock()) as core:
        result = await search(core).search(1, "what is the boat called")
        seeded = await search(core).search(1, "memory files")  # the seeded AGENTS.md is indexed too

    assert "Marlin" in result["results"][0]["snippet"]
    assert any(r.get("filename") == "AGENTS.md" for r in seeded["results"])


async def test_a_version_6_index_gets_its_substring_scope(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with open_core(config, clock=pinned_clock()) as core:
        await core.agents.ensure_configured()
        await talk(core, "console:me", 1, "My locker code is QX7731.", "Got it.")
    with sqlite3.connect(config.mate.database.path) as conn:  # the substring index as version 6 made it
        conn.execute("DROP TABLE mate_search_trigram")
        conn.execute("CREATE VIRTUAL TABLE mate_search_trigram USING fts5(body, source UNINDEXED, "
                     "agent_id UNINDEXED, conversation_id UNINDEXED, ref_id UNINDEXED, filename UNINDEXED, "
                     "time UNINDEXED, tokenize = 'trigram')")
        conn.execute("DROP TABLE mate_person_account")  # and what later versions added
        conn.execute("DROP TABLE mate_person")
        conn.execute("ALTER TABLE mate_conversation DROP COLUMN is_group")
        conn.execute("DELETE FROM schema_version WHERE version >= 7")
    async with open_core(config, clock=pinned_clock()) as core:
        inside = await search(core).search(1, "X773")  # part of a word: only the substring index has it
        other = await search(core).search(2, "X773")
        await talk(core, "console:me", 1, "The spare key is under pot 44Z9.", "Noted.")
        added = await search(core).search(1, "4Z9")

    assert [r["snippet"] for r in inside["results"]] == ["My locker code is QX7731."]
    assert other["results"] == []
    assert any("44Z9" in r["snippet"] for r in added["results"])


# -- the tool, the API, the command and the CLI ------------------------------------------------------


async def test_the_model_can_search_through_the_tool(tmp_path: Path) -> None:
    from tests.support.fakes.anthropic import FakeAnthropic
    from tests.support.runtime import chat, running

    async with FakeAnthropic() as fake, running(tmp_path, fake) as rt:
        fake.reply_text("noted")
        await chat(rt, "My bike lock code is 9921.")
        fake.reply_tool_use("search_memory", {"query": "bike lock code", "agentId": 99})
        fake.reply_text("It is 9921.")
        reply = await chat(rt, "what was my bike lock code?")

    assert reply == "It is 9921."
    result = tool_result(fake.messages_requests()[-1])
    assert result["agentId"] == 1  # the running agent, whatever the model asked for
    assert "9921" in result["results"][0]["snippet"]


def tool_result(body: dict[str, Any]) -> dict[str, Any]:
    [block] = [b for b in body["messages"][-1]["content"] if b["type"] == "tool_result"]
    content = block["content"]
    return json.loads(content if isinstance(content, str) else content[0]["text"])


async def test_api_and_command_search(tmp_path: Path) -> None:
    from channels.base import InboundMessage
    from tests.support.api_env import open_api

    telegram = {"telegram": {"group-policy": "open", "admins": ["7"]}}
    async for api in open_api(tmp_path, channels=telegram):
        api.fake.reply_text("noted")
        await api.call("POST", "/api/v1/chat/1", json={"message": "The wifi password hint is 'green owl'."})
        status, body = await api.call("GET", "/api/v1/memory/1/search?q=wifi%20password&limit=3")
        bad = await api.call("GET", "/api/v1/memory/1/search?q=")
        admin = InboundMessage("console", "me", "me", "me", "/memory search wifi", is_admin=True)
        in_chat = await api.rt.router.handle(admin)
        too_long = await api.rt.router.handle(
            InboundMessage("console", "me", "me", "me", "/memory search " + "x" * 1500, is_admin=True))
        group = await api.rt.router.handle(InboundMessage(
            "telegram", "-5", "7", "Ann", "/memory search wifi", is_direct=False, mentions_bot=True))

    assert status == 200 and body["data"]["count"] >= 1 and "green owl" in body["data"]["results"][0]["snippet"]
    assert bad[0] == 400
    assert in_chat is not None and "green owl" in in_chat.text
    assert too_long is not None and "1500 characters" in too_long.text and not too_long.failure
    assert group is not None and "direct chat" in group.text


def test_cli_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from bot.__main__ import main

    async def remember() -> None:
        async with open_core(make_config(tmp_path), clock=pinned_clock()) as core:
            await core.agents.ensure_configured()
            await talk(core, "console:me", 1, "The spare key is under the blue pot.", "Noted.")

    asyncio.run(remember())
    config_path = tmp_path / "config.yaml"
    config_path.write_text(f"mate:\n  timezone: UTC\n  database:\n    path: {tmp_path / 'mate.db'}\n")
    assert main(["memory", "search", "--config", str(config_path), "--agent", "1", "--json", "where", "is",
                 "the", "spare", "key"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["results"][0]["conversationId"] == "console:me"
    assert main(["memory", "search", "--config", str(config_path), "--agent", "1", "spare key"]) == 0
    assert "blue pot" in capsys.readouterr().out


@pytest.mark.parametrize(("arguments", "problem"), [
    ({"query": ""}, "non-empty"), ({"query": "   "}, "non-empty"), ({}, "non-empty"), ("just text", "JSON object"),
    ({"query": "x" * 10_000}, "at most 1000"), ({"query": "key\x00"}, "U+0000"), ({"query": "key", "limit": 0}, "limit"),
    ({"query": "key", "limit": True}, "limit"), ({"query": "key", "source": "files"}, "source"),
])
async def test_the_tool_refuses_bad_input_with_a_reason(core: Core, arguments: Any, problem: str) -> None:
    from memory.recall.tool import MemorySearchTool

    result = await MemorySearchTool(search(core), core.prompts).call(1, "search_memory", arguments)
    assert result.is_error and problem in json.loads(result.content)["error"]


async def test_the_tool_searches_the_longest_query_it_takes(core: Core) -> None:
    from memory.recall.tool import MemorySearchTool

    await talk(core, "console:me", 1, "the spare key is under the pot", "ok")
    query = ("where is the spare key " * 500)[:MAX_QUERY_CHARS]
    result = await MemorySearchTool(search(core), core.prompts).call(1, "search_memory", {"query": query})
    assert not result.is_error and "spare key" in json.loads(result.content)["results"][0]["snippet"]


async def test_a_short_word_finds_the_word_not_pieces_of_others(core: Core) -> None:
    await talk(core, "console:me", 1, "My cat is called Tom.", "Cute!", "Please indicate the location.",
               "We need to educate and communicate.", "Check the category.", "ok")
    result = await search(core).search(1, "cat")
    assert result["results"][0]["snippet"] == "My cat is called Tom."
    partial = await search(core).search(1, "penicil")
    assert partial["count"] == 0
    await talk(core, "console:2", 1, "I am allergic to penicillin.", "Noted.")
    assert "penicillin" in (await search(core).search(1, "penicil"))["results"][0]["snippet"]


async def test_korean_and_full_width_text_are_found(core: Core) -> None:
    await talk(core, "console:me", 1, "우리 고양이 이름은 나비예요.", "귀엽네요.", "新しいｉＰｈｏｎｅを買った。", "いいね。")
    assert "나비예요" in (await search(core).search(1, "나비"))["results"][0]["snippet"]
    assert "ｉＰｈｏｎｅ" in (await search(core).search(1, "iphone"))["results"][0]["snippet"]


async def test_an_answer_is_found_by_the_words_of_its_question(core: Core) -> None:
    # Real dialogue: the fact is in the reply, the keywords in the turn before it.
    ids = await group_talk(core, "tg:-7", 2, "[Ann] What breed is your new dog?",
                           "[Bo] A greyhound, three years old.", *CHATTER)
    result = await search(core).search(2, "which dog breed")
    assert ids[1] in [r["messageId"] for r in result["results"]]
    # After the assistant's turn it is not: a hit shows its neighbours anyway.
    [_, reply] = await talk(core, "console:me", 1, "What is the capital of Peru?", "Lima.")
    assert reply not in [r["messageId"] for r in (await search(core).search(1, "capital Peru"))["results"]]


async def test_what_a_named_person_said_ranks_above_what_others_said_about_it(core: Core) -> None:
    # In a two-person group each name is in half the rows (the speaker's "[Name] " and the
    # other one's "Thanks, Nate!"), so as a word it weighs nothing: short turns about ice cream
    # outrank the one where Nate says what he thought of it.
    others = [f"[Joanna] Nate, the ice cream {flavour} was lovely!" for flavour in
              ("with mango", "with nuts", "in the cone", "at the fair", "with berries", "in the park")]
    ids = await group_talk(core, "tg:-9", 2, *others, "[Nate] Honestly, my coconut ice cream came out "
                           "rich and creamy, better than any I have bought, so it is my new favourite snack.",
                           "[Joanna] Sounds good.", *(f"[Joanna] {text}" for text in CHATTER))
    results = (await search(core).search(2, "What did Nate think of the ice cream?"))["results"]
    assert results[0]["messageId"] == ids[6]
    # Nobody named: the shorter turns first, as before.
    assert ids[6] not in [r["messageId"] for r in (await search(core).search(2, "the ice cream"))["results"]]


def test_a_query_names_a_speaker_by_any_word_of_the_name() -> None:
    assert speaker("[Anna Lee] hi") == "Anna Lee" and speaker("hi [Anna] x") is None and speaker("[] x") is None
    assert names_in("what did anna say?", "Anna Lee") and names_in("Lee's dog", "Anna Lee")
    assert names_in("小明喜欢什么", "小明") and not names_in("what did Annabel say", "Anna")
    assert not names_in("what did I say", "I") and not names_in("what did the team say", "The")


async def test_a_message_is_found_by_its_date_in_words(core: Core) -> None:
    await talk(core, "console:me", 1, *CHATTER)
    for when, text in (("2023-05-07 10:00:00", "We went hiking with the kids."),
                       ("2023-08-19 10:00:00", "We went swimming with the kids.")):
        await core.db.execute("INSERT INTO mate_message(conversation_id, role, content, token_count, create_time) "
                              "VALUES ('console:me', 'user', ?, 5, ?)", (text, when))
    result = await search(core).search(1, "what did we do with the kids in May 2023?")
    assert "hiking" in result["results"][0]["snippet"]
    sunday = await search(core).search(1, "kids on Sunday")  # 7 May 2023 was a Sunday
    assert "hiking" in sunday["results"][0]["snippet"]


async def test_a_deleted_question_is_not_found_through_its_answer(core: Core) -> None:
    [question, answer] = await group_talk(core, "tg:-7", 1, "[Ann] Bo, what is the bank PIN hint?",
                                          "[Bo] The old street name.")
    assert {r["messageId"] for r in (await search(core).search(1, "bank PIN hint"))["results"]} == {question, answer}
    await core.db.execute("DELETE FROM mate_message WHERE id = ?", (question,))
    assert (await search(core).search(1, "bank PIN hint"))["count"] == 0
    [edited, reply] = await group_talk(core, "tg:-7", 1, "[Ann] The alarm code is 4417.", "[Bo] Thanks.")
    await core.db.execute("UPDATE mate_message SET content = 'The alarm is off.' WHERE id = ?", (edited,))
    assert (await search(core).search(1, "alarm code"))["results"][0]["messageId"] == edited
    assert reply not in {r["messageId"] for r in (await search(core).search(1, "4417"))["results"]}


async def test_another_agents_many_hits_never_crowd_out_ours(core: Core) -> None:
    await talk(core, "tg:-100", 2, *[f"[Bob] the meeting number {i} ran long" for i in range(400)])
    await talk(core, "console:me", 1, "The team meeting is moved to Friday.", "ok")
    result = await search(core).search(1, "did the team meeting run long?")
    assert {r["conversationId"] for r in result["results"]} == {"console:me"}


async def test_another_agents_newer_substring_hits_never_crowd_out_ours(core: Core) -> None:
    # Agent 1's one hit is older than 3 000 of agent 2's: more than the substring scan's 2 000.
    [mine, _] = await talk(core, "console:me", 1, "I am allergic to penicillin.", "Noted.")
    await core.repos.conversations.create("tg:-100", agent_id=2, channel="telegram", chat_key="tg:-100",
                                          trigger_source="channel")
    await core.repos.messages.add_many("tg:-100", [("user", f"[Bob] story {i} about penicillin", 5)
                                                   for i in range(3000)])
    for query, source in (("penicil", "all"), ("penicil", "conversations"), ("icilli", "all")):
        result = await search(core).search(1, query, source=source)
        assert [r["messageId"] for r in result["results"]] == [mine], (query, source)
    theirs = await search(core).search(2, "penicil", limit=3)
    assert theirs["count"] == 3 and all("[Bob]" in r["snippet"] for r in theirs["results"])


async def test_odd_characters_in_a_query_are_answered(core: Core) -> None:
    await talk(core, "console:me", 1, "plain words", "ok")
    result = await search(core).search(1, "words \ud800 lone surrogate")
    assert result["results"][0]["snippet"] == "plain words"
