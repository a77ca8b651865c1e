"""The storage contract, memory and tasks side: each test runs on SQLite and on PostgreSQL (`sql`)."""

from __future__ import annotations

import pytest

from bot.storage.agents import AgentRepository
from bot.storage.conversations import ConversationRepository, MessageRepository
from bot.storage.file_history import FileHistoryRepository, VersionConflict
from bot.storage.memory_commit import ExtractionCommit, FileWrite, MemoryCommitRepository
from bot.storage.memory_state import MemoryPendingRepository, MemoryRunRepository
from bot.storage.proposals import ProposalRepository
from bot.storage.sql import SqlDatabase
from bot.storage.tasks import ChatRef, NewTask, TaskRepository
from bot.storage.workspace_files import WorkspaceFileRepository

CHAT = ChatRef("telegram", "42")


async def _chat(sql: SqlDatabase) -> None:
    await AgentRepository(sql).ensure(1, "Mate")
    await ConversationRepository(sql).create("c1", agent_id=1, channel="telegram", chat_key="telegram:42",
                                             trigger_source="channel")


def _reminder(message: str, due: str = "2026-03-04T08:00:00Z") -> NewTask:
    return NewTask(agent_id=1, message=message, cron="", timezone="UTC", run_at=due, next_run_time=due,
                   chat=CHAT, created_by="7", created_by_name="Ann")


async def test_pending_extraction_moves_forward_only_and_survives_a_newer_message(sql: SqlDatabase) -> None:
    await _chat(sql)
    pending = MemoryPendingRepository(sql)
    await pending.upsert("c1", 1, 10, "channel", due_time="2026-03-04T08:00:00Z")
    await pending.upsert("c1", 1, 4, "channel")
    row = await pending.get("c1")
    assert row is not None and row.upto_message_id == 10
    assert await pending.record_failure("c1", "model down", "2026-03-04T08:05:00Z") == 1
    await pending.complete("c1", 9)  # a newer message (10) is still waiting
    assert await pending.get("c1") is not None
    await pending.complete("c1", 10)
    assert await pending.all() == []


async def test_conversations_left_unanalysed_are_found_with_their_last_words(sql: SqlDatabase) -> None:
    await _chat(sql)
    messages = MessageRepository(sql)
    await messages.add("c1", "user", "[Ann] my cat is called Tom", 5, sender_id="7", sender_name="Ann")
    last = await messages.add("c1", "assistant", "Nice!", 1)
    found = await MemoryPendingRepository(sql).unrecorded()
    assert [(u.conversation_id, u.last_message_id, u.last_user_text) for u in found] == [
        ("c1", last, "my cat is called Tom")]


async def test_memory_runs_start_finish_and_fail_when_interrupted(sql: SqlDatabase) -> None:
    await _chat(sql)
    runs = MemoryRunRepository(sql)
    first = await runs.start(1, "extraction", "c1")
    second = await runs.record(1, "extraction", "skipped", conversation_id="c1", reason="nothing new")
    assert second > first
    await runs.finish(first, "completed", reason="kept 2 facts")
    interrupted = await runs.start(1, "emergence")
    assert await runs.fail_interrupted("stopped") == 1
    assert (await runs.get(interrupted)).status == "failed"  # type: ignore[union-attr]
    assert [r.id for r in await runs.recent(1)] == [interrupted, second, first]
    assert [r.status for r in await runs.for_conversation("c1")] == ["completed", "skipped"]


async def test_reminders_respect_the_chat_limit_and_are_claimed_once(sql: SqlDatabase) -> None:
    await _chat(sql)
    tasks = TaskRepository(sql)
    first = await tasks.add(_reminder("water the plants"), limit=2)
    second = await tasks.add(_reminder("call mum", "2026-03-04T09:00:00Z"), limit=2)
    assert first is not None and second is not None and second > first
    assert await tasks.add(_reminder("one too many"), limit=2) is None
    assert [t.id for t in await tasks.in_chat(CHAT)] == [first, second]
    assert [t.id for t in await tasks.due("2026-03-04T08:30:00Z")] == [first]
    assert await tasks.next_due() == "2026-03-04T08:00:00Z"
    assert await tasks.claim(first, "2026-03-04T08:00:00Z", None, ran="2026-03-04T08:00:01Z") is True
    assert await tasks.claim(first, "2026-03-04T08:00:00Z", None, ran="2026-03-04T08:00:01Z") is False
    assert await tasks.cancel(second, chat=CHAT) is True
    assert await tasks.in_chat(CHAT) == []
    system = await tasks.add_system(1, "nightly", "0 2 * * *", "UTC", "emergence", "review")
    assert [t.id for t in await tasks.system_tasks(1)] == [system]
    assert await tasks.set_next_run(system, "2026-03-05T02:00:00Z") is True


async def test_workspace_files_keep_versions_and_history_undoes_a_run(sql: SqlDatabase) -> None:
    await _chat(sql)
    files = WorkspaceFileRepository(sql)
    created = await files.insert(1, "MEMORY.md", "# Memory\n", enabled=True, sort_order=20)
    assert created is not None and created.version == 1
    assert await files.insert(1, "MEMORY.md", "again", enabled=True, sort_order=20) is None
    run = await MemoryRunRepository(sql).start(1, "extraction", "c1")
    assert await files.update_content(created.id, "# Memory\n- likes tea\n", 1, change="extraction", run_id=run)
    assert not await files.update_content(created.id, "stale", 1)
    assert await files.append_content(created.id, "- has a cat\n", 2, change="tool")
    now = await files.get(1, "MEMORY.md")
    assert now is not None and now.version == 3 and now.content.endswith("- has a cat\n")
    history = FileHistoryRepository(sql)
    assert [v.version for v in await history.versions(created.id)] == [3, 2, 1]
    found = await history.oldest_containing(1, "LIKES TEA")
    assert found is not None and found.version == 2
    changes = await history.run_changes(run)
    assert [(c.filename, c.made_version, c.current_version) for c in changes] == [("MEMORY.md", 2, 3)]
    with pytest.raises(VersionConflict):  # the file changed after the run
        await history.undo(run, changes, keep=50)
    assert [f.filename for f in await files.list(1, "MEM")] == ["MEMORY.md"]
    assert await files.soft_delete(created.id) is True and await files.count(1) == 0


async def test_an_extraction_commit_writes_files_moves_the_watermark_and_clears_pending(sql: SqlDatabase) -> None:
    await _chat(sql)
    pending = MemoryPendingRepository(sql)
    await pending.upsert("c1", 1, 5, "channel")
    run = await MemoryRunRepository(sql).start(1, "extraction", "c1")
    await MemoryCommitRepository(sql).commit(ExtractionCommit(
        agent_id=1, conversation_id="c1", files=[FileWrite("PROFILE.md", "- name: Ann\n", 0, enabled=True)],
        watermark=5, run_id=run, run_status="completed", run_reason="one fact"))
    profile = await WorkspaceFileRepository(sql).get(1, "PROFILE.md")
    assert profile is not None and profile.content == "- name: Ann\n" and profile.enabled
    assert (await ConversationRepository(sql).get("c1")).memory_upto_message_id == 5  # type: ignore[union-attr]
    assert await pending.get("c1") is None
    assert (await MemoryRunRepository(sql).get(run)).status == "completed"  # type: ignore[union-attr]
    assert await FileHistoryRepository(sql).last_chat_run("telegram:42", 1) == run


async def test_a_proposal_replaces_the_waiting_one_and_applies_onto_its_version(sql: SqlDatabase) -> None:
    await _chat(sql)
    files = WorkspaceFileRepository(sql)
    soul = await files.insert(1, "SOUL.md", "calm", enabled=True, sort_order=10)
    assert soul is not None
    proposals = ProposalRepository(sql)
    first = await proposals.propose(1, "SOUL.md", 1, "cheerful", "asked", None, "2999-01-01T00:00:00Z")
    second = await proposals.propose(1, "SOUL.md", 1, "warm", "asked again", None, "2999-01-01T00:00:00Z")
    assert (await proposals.get(first)).status == "replaced"  # type: ignore[union-attr]
    waiting = await proposals.pending(1, "2026-03-04T08:00:00Z")
    assert waiting is not None and waiting.id == second
    assert await proposals.apply(waiting, keep=50) is True
    assert (await files.get(1, "SOUL.md")).content == "warm"  # type: ignore[union-attr]


async def test_a_lease_is_held_by_one_daemon_until_it_expires(sql: SqlDatabase) -> None:
    from datetime import datetime, timedelta, timezone

    from bot.storage.leases import LeaseRepository

    leases = LeaseRepository(sql)
    now = datetime(2026, 3, 4, 8, 0, tzinfo=timezone.utc)
    assert await leases.take("telegram:bot", "a", now, 60) is True
    assert await leases.take("telegram:bot", "b", now + timedelta(seconds=59), 60) is False
    assert await leases.take("telegram:bot", "a", now + timedelta(seconds=20), 60) is True  # renewed to 80 s
    assert await leases.take("telegram:bot", "b", now + timedelta(seconds=70), 60) is False
    assert await leases.holder("telegram:bot", now + timedelta(seconds=70)) == "a"
    assert await leases.held("telegram:", now + timedelta(seconds=70)) == {"telegram:bot": "a"}
    assert await leases.held("discord:", now + timedelta(seconds=70)) == {}
    assert await leases.take("telegram:bot", "b", now + timedelta(seconds=80), 60) is True  # expired: taken over
    await leases.release("telegram:bot", "a")  # not a's any more: nothing happens
    assert await leases.holder("telegram:bot", now + timedelta(seconds=81)) == "b"
    await leases.release("telegram:bot", "b")
    assert await leases.take("telegram:bot", "a", now + timedelta(seconds=82), 60) is True


async def test_two_writers_of_one_version_one_wins_and_history_holds_every_version(sql: SqlDatabase) -> None:
    import asyncio

    await _chat(sql)
    files = WorkspaceFileRepository(sql)
    note = await files.insert(1, "MEMORY.md", "# Memory\n", enabled=True, sort_order=20)
    assert note is not None
    for attempt in range(5):  # both read version v, then both write: only one may land
        version = (await files.get(1, "MEMORY.md")).version  # type: ignore[union-attr]
        results = await asyncio.gather(
            files.update_content(note.id, f"# Memory\n- from extraction {attempt}\n", version, change="extraction"),
            files.append_content(note.id, f"- from the tool {attempt}\n", version, change="tool"))
        assert sorted(results) == [False, True], results
    final = await files.get(1, "MEMORY.md")
    assert final is not None and final.version == 6
    assert [v.version for v in await FileHistoryRepository(sql).versions(note.id)] == [6, 5, 4, 3, 2, 1]


async def test_reminders_asked_at_once_stay_within_the_chat_limit(sql: SqlDatabase) -> None:
    import asyncio

    await _chat(sql)
    added = await asyncio.gather(*(TaskRepository(sql).add(_reminder(f"r{n}"), limit=3) for n in range(8)))
    assert sum(1 for task_id in added if task_id is not None) == 3


async def test_runs_left_running_are_closed_unless_another_daemon_runs_them(sql: SqlDatabase) -> None:
    from datetime import datetime, timezone

    from bot.storage.leases import LeaseRepository

    await _chat(sql)
    await AgentRepository(sql).ensure(2, "Other")
    runs, leases = MemoryRunRepository(sql), LeaseRepository(sql)
    mine, theirs = await runs.start(1, "extraction", "c1"), await runs.start(2, "extraction")
    soon = datetime(2999, 1, 1, tzinfo=timezone.utc)  # the leases outlive the test, whatever the day
    assert await leases.take("memory:1", "this daemon", soon, 60)
    assert await leases.take("memory:2", "another daemon", soon, 60)
    assert await runs.fail_interrupted("stopped", holder="this daemon") == 1  # this daemon's own, restarted
    assert (await runs.get(mine)).status == "failed"  # type: ignore[union-attr]
    assert (await runs.get(theirs)).status == "running"  # type: ignore[union-attr]


async def test_a_lease_that_cannot_be_renewed_in_time_counts_as_lost(sql: SqlDatabase) -> None:
    import asyncio
    from datetime import datetime, timedelta, timezone

    from bot.storage.leases import LeaseRepository, Leases

    class Failing(LeaseRepository):
        down = False

        async def take(self, name: str, holder: str, now: datetime, seconds: float) -> bool:
            if self.down:
                raise ConnectionError("the database is away")
            return await super().take(name, holder, now, seconds)

    moments = [datetime(2026, 3, 4, 8, 0, tzinfo=timezone.utc)]

    async def sleep(seconds: float) -> None:  # simulated time: each renewal comes `seconds` later
        moments[0] += timedelta(seconds=seconds)

    repository = Failing(sql)
    leases = Leases(repository, "this daemon", clock=lambda: moments[0], seconds=60, renew_every=20, sleep=sleep)
    lost = asyncio.Event()
    async with leases.held("telegram:1", lost) as held:
        assert held
        repository.down = True
        await asyncio.wait_for(lost.wait(), 5)  # within the lease's life, not for ever
        assert moments[0] - datetime(2026, 3, 4, 8, 0, tzinfo=timezone.utc) <= timedelta(seconds=60)
        repository.down = False
