"""The storage contract, conversations side: each test runs on SQLite and on PostgreSQL (`sql`)."""

from __future__ import annotations

from bot.storage.agents import AgentRepository, AgentSeed
from bot.storage.conversations import ConversationRepository, MessageRepository
from bot.storage.incognito import IncognitoRepository
from bot.storage.people import PersonRepository
from bot.storage.sql import SqlDatabase
from bot.storage.usage import LlmUsageRecord, LlmUsageRepository

SEED = AgentSeed(name="Mate", files=(), job=("nightly", "0 2 * * *", "UTC", "emergence", "review"))


async def _conversation(sql: SqlDatabase, conversation_id: str = "c1", chat_key: str = "telegram:1") -> None:
    await AgentRepository(sql).ensure(1, "Mate")
    await ConversationRepository(sql).create(conversation_id, agent_id=1, channel="telegram", chat_key=chat_key,
                                             trigger_source="channel")


async def test_agents_are_created_once_and_per_chat_agents_get_ids_above_the_configured(sql: SqlDatabase) -> None:
    agents = AgentRepository(sql)
    assert await agents.ensure(1, "Mate") is True
    assert await agents.ensure(1, "Other name") is False
    assert [(a.id, a.name) for a in await agents.list()] == [(1, "Mate")]
    first, created = await agents.provision(SEED, chat_key="telegram:-100", min_id=1000)
    again, created_again = await agents.provision(SEED, chat_key="telegram:-100", min_id=1000)
    assert (first, created, created_again) == (again, True, False) and first > 1000
    assert await agents.agent_for_chat("telegram:-100") == first
    assert await agents.bound_to_chats([first, 1]) == {first: "telegram:-100"}
    jobs = await sql.fetchall("SELECT name, task_type FROM mate_cron_job WHERE agent_id = ?", (first,))
    assert [(r["name"], r["task_type"]) for r in jobs] == [("nightly", "emergence")]


async def test_a_conversation_is_created_once_summarised_forward_only_and_archived(sql: SqlDatabase) -> None:
    await _conversation(sql)
    conversations = ConversationRepository(sql)
    again = await conversations.create("c1", agent_id=1, channel="telegram", chat_key="other",
                                       trigger_source="channel")
    assert again.chat_key == "telegram:1"
    assert (await conversations.active_for_chat("telegram:1")).id == "c1"  # type: ignore[union-attr]
    assert await conversations.set_summary("c1", "first", 10) is True
    assert await conversations.set_summary("c1", "older", 5) is False
    await conversations.set_memory_watermark("c1", 7)
    await conversations.set_memory_watermark("c1", 3)
    record = await conversations.get("c1")
    assert record is not None and (record.summary, record.summary_upto_message_id) == ("first", 10)
    assert record.memory_upto_message_id == 7
    await conversations.archive("c1")
    assert await conversations.active_for_chat("telegram:1") is None
    assert await conversations.count_for_chat("telegram:1") == 1 and await conversations.count() == 1


async def test_messages_keep_their_order_count_and_neighbours(sql: SqlDatabase) -> None:
    await _conversation(sql)
    messages = MessageRepository(sql)
    first = await messages.add("c1", "user", "hello", 2, sender_id="7", sender_name="Ann")
    user_id, before = await messages.add_user("c1", "how are you", 3, sender_id="7", external_id="m-9")
    assert before == first
    ids, count = await messages.add_turn("c1", [("assistant", "fine", 1), ("tool", "[]", 1, "blocks")])
    assert ids == sorted(ids) and ids[0] > user_id
    assert count == 3  # user, user, assistant: tool rows are not counted
    assert await ConversationRepository(sql).message_count("c1") == 3
    found = await messages.find_external("c1", "m-9")
    assert found is not None and found[0].id == user_id and found[1] == first and found[2] is True
    assert [m.content for m in await messages.after("c1", first)] == ["how are you", "fine", "[]"]
    assert [m.id for m in await messages.latest("c1", 2)] == ids
    assert [m.id for m in await messages.oldest("c1", 2, roles=("user",))] == [first, user_id]
    page = await messages.window_page("c1", 10, after_id=0, upto_id=ids[-1])
    assert [row[0] for row in page] == [first, user_id, *ids] and page[-1][5] == "blocks"
    assert await messages.count("c1", after_id=first) == 3
    assert await messages.recent_senders("c1", 5) == ["7"]
    assert await messages.chat_key_of(user_id) == "telegram:1"
    assert await messages.last_id("c1") == ids[-1] and await messages.count_all() == 4


async def test_recent_activity_and_unanswered_messages(sql: SqlDatabase) -> None:
    await _conversation(sql, "c1", "telegram:1")
    await _conversation(sql, "c2", "telegram:2")
    messages = MessageRepository(sql)
    await messages.add_many("c1", [("user", "hi", 1), ("assistant", "hello", 1)])
    waiting, _ = await messages.add_user("c2", "anyone?", 1)
    activity = await ConversationRepository(sql).recent_activity(1)
    assert {a.conversation.id: a.message_count for a in activity} == {"c1": 2, "c2": 1}
    assert await ConversationRepository(sql).recent_activity(None) != []
    unanswered = await messages.unanswered_since("1970-01-01T00:00:00")
    assert [(c, m.id) for c, m, _ in unanswered] == [("c2", waiting)]


async def test_incognito_starts_once_and_hides_what_follows(sql: SqlDatabase) -> None:
    await _conversation(sql)
    messages = MessageRepository(sql)
    kept = await messages.add("c1", "user", "remember me", 1)
    incognito = IncognitoRepository(sql)
    assert await incognito.start("c1") is True
    assert await incognito.start("c1") is False
    hidden = await messages.add("c1", "user", "not this", 1)
    assert await incognito.holds(hidden) is True and await incognito.holds(kept) is False
    remembered = await messages.latest("c1", 10, remembered_only=True)
    assert [m.id for m in remembered] == [kept]
    assert await incognito.end("c1") == 1
    assert await incognito.get("c1") is None


async def test_people_link_accounts_and_unlink_the_rest(sql: SqlDatabase) -> None:
    people = PersonRepository(sql)
    await people.ensure_owner("Owner")
    ann = await people.create_for_account("telegram", "7", "Ann")
    assert (await people.for_account("telegram", "7")) == ann
    linked = await people.link("Ann", [("telegram", "7"), ("discord", "70")])
    assert linked == ann.id
    assert (await people.for_account("discord", "70")).id == ann.id  # type: ignore[union-attr]
    assert await people.unlink_all_but([("telegram", "7")]) == 1
    assert await people.for_account("discord", "70") is None
    assert {p.name for p in await people.list()} >= {"Owner", "Ann"}


async def test_usage_totals_sum_per_purpose(sql: SqlDatabase) -> None:
    usage = LlmUsageRepository(sql)
    for tokens in (10, 20):
        await usage.queue(LlmUsageRecord("chat", "m", tokens, 1, 2, 3, agent_id=1))
    await usage.queue(LlmUsageRecord("memory", "m", 5, 0, 0, 1, agent_id=2))
    totals = {t.purpose: t for t in await usage.totals_since("1970")}
    assert (totals["chat"].calls, totals["chat"].input_tokens, totals["chat"].prompt_tokens) == (2, 30, 36)
    assert isinstance(totals["chat"].output_tokens, int)
    assert [t.purpose for t in await usage.totals_since("1970", agent_id=2)] == ["memory"]


async def test_agents_and_people_made_at_once_get_ids_of_their_own(sql: SqlDatabase) -> None:
    import asyncio

    agents, people = AgentRepository(sql), PersonRepository(sql)
    await agents.ensure(1, "Mate")
    await people.ensure_owner("Owner")
    made = await asyncio.gather(*(agents.provision(SEED, chat_key=f"telegram:{n}", min_id=1000) for n in range(6)))
    assert len({agent_id for agent_id, _ in made}) == 6 and all(created for _, created in made)
    again = await asyncio.gather(*(agents.provision(SEED, chat_key="telegram:-7", min_id=1000) for _ in range(4)))
    assert len({agent_id for agent_id, _ in again}) == 1 and sum(created for _, created in again) == 1
    persons = await asyncio.gather(*(people.create_for_account("telegram", str(n), f"P{n}") for n in range(6)))
    assert len({p.id for p in persons}) == 6
    same = await asyncio.gather(*(people.create_for_account("discord", "9", "Nine") for _ in range(4)))
    assert len({p.id for p in same}) == 1
