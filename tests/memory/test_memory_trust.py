"""Memory people can check, through the real Telegram adapter and API: receipts, history, /undo,
/memory why and /incognito (SPEC S29)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from bot.conversation.agents import EMERGENCE_JOB_NAME
from bot.core.clock import parse_iso
from bot.schedule.system_tasks import SystemTaskRunner
from bot.app.runtime import open_runtime
from channels.base import InboundMessage
from tests.support.config import make_config
from tests.support.fakes.anthropic import ErrorReply, ToolUseReply
from tests.support.trust_env import FRIEND, Trust, running_bot

LISBON = {"profile_update": "# User profile\n\n- Lives in Lisbon (moved last month)", "daily_entry": "ECHO"}


def rows(bot: Trust, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(bot.rt.core.config.mate.database.path, timeout=5)) as conn:
        return [tuple(r) for r in conn.execute(sql, params)]


async def test_a_receipt_tells_what_was_kept_and_undo_takes_it_back(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as bot:
        seed = await bot.file("PROFILE.md")
        bot.memory_replies.append(LISBON)
        assert await bot.say("I moved to Lisbon last month") == "ok"
        await bot.until(lambda: bool(bot.receipts()), "the receipt")
        (receipt,) = bot.receipts()
        assert receipt == "Noted: Lives in Lisbon (moved last month) (PROFILE.md)\n/undo to take it back"
        assert "Lives in Lisbon" in await bot.file("PROFILE.md")

        history = await bot.say("/memory history PROFILE.md")
        assert history.splitlines()[0] == "Latest memory changes:"
        assert "PROFILE.md v2: kept from a chat (tg:42)" in history
        assert "PROFILE.md v1: imported, or there before history began" in history
        # A file that never changed shows the version it has.
        assert "AGENTS.md v1: imported, or there before history began" in await bot.say("/memory history AGENTS.md")

        why = await bot.say("/memory why lisbon")
        assert why.startswith('"lisbon" came into PROFILE.md on ')
        assert "kept from a chat (tg:42)" in why
        assert "  • I moved to Lisbon last month" in why.splitlines()

        undone = await bot.say("/undo")
        assert undone.startswith("Taken back: PROFILE.md, memory/") and "are as they were before" in undone
        assert await bot.file("PROFILE.md") == seed
        assert [f.filename for f in await bot.rt.core.workspace.list(1, "memory/")] == []  # the run made it
        changes = [(v.filename, v.change) for v in await bot.rt.core.repos.file_history.recent(1, 3, "PROFILE.md")]
        assert changes[0] == ("PROFILE.md", "undo")  # the undo is a version of its own
        assert await bot.say("/undo") == bot.prompts.text("undo_already")
        # An exchange that keeps nothing sends no receipt.
        assert await bot.say("thanks, that is all for today") == "ok"
        await bot.settled(2)
        assert len(bot.receipts()) == 1 and len(bot.memory_requests()) == 2


async def test_undo_after_a_later_edit_refuses_and_names_the_file(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as bot:
        bot.memory_replies.append({**LISBON, "memory_update": "# Core memory\n\n- Plans a trip to Porto"})
        await bot.say("I moved to Lisbon and plan a trip to Porto")
        await bot.until(lambda: bool(bot.receipts()), "the receipt")
        assert bot.receipts()[0].splitlines()[:2] == [
            "Noted: Lives in Lisbon (moved last month) (PROFILE.md)", "Noted: Plans a trip to Porto (MEMORY.md)"]
        api = bot.services.api
        assert api is not None
        memory, version = await bot.rt.core.workspace.read_text(1, "MEMORY.md")
        async with aiohttp.ClientSession() as http, http.put(
                f"http://127.0.0.1:{api.port}/api/v1/memory/1/files/MEMORY.md",
                headers={"Authorization": f"Bearer {api.token}"},
                json={"content": memory + "- Trip is in June\n", "version": version}) as response:
            assert response.status == 200, await response.text()
        profile = await bot.file("PROFILE.md")

        answer = await bot.say("/undo")
        assert answer.startswith("MEMORY.md has changed since (") and "nothing was undone" in answer
        assert await bot.file("PROFILE.md") == profile  # neither file went back
        assert (await bot.file("MEMORY.md")).endswith("- Trip is in June\n")
        assert not await bot.rt.core.repos.file_history.was_undone(1) and rows(
            bot, "SELECT COUNT(*) FROM mate_workspace_file_history WHERE change = 'undo'") == [(0,)]


async def test_undo_and_incognito_in_a_group_are_for_admins_only(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as bot:
        assert await bot.say("/undo", chat=FRIEND) == bot.prompts.text("undo_nothing")  # their own direct chat
        bot.tg.push_text("/undo", chat_id=-100, user_id=FRIEND, chat_type="group")
        await bot.until(lambda: bool(bot.sent(-100)), "the group's answer")
        bot.tg.push_text("/incognito on", chat_id=-100, user_id=FRIEND, chat_type="group")
        await bot.until(lambda: len(bot.sent(-100)) == 2, "the group's second answer")
        assert bot.sent(-100) == [bot.prompts.text("undo_not_allowed"), bot.prompts.text("incognito_not_allowed")]


async def test_history_route_lists_versions_and_keeps_the_newest(tmp_path: Path) -> None:
    async with running_bot(tmp_path, **{"history-versions": 3}) as bot:
        api = bot.services.api
        assert api is not None
        base = f"http://127.0.0.1:{api.port}/api/v1/memory/1/files"
        auth = {"Authorization": f"Bearer {api.token}"}
        async with aiohttp.ClientSession() as http:
            for n in range(1, 5):
                _, version = await bot.rt.core.workspace.read_text(1, "memory/notes.md")
                async with http.put(f"{base}/memory/notes.md", headers=auth,
                                    json={"content": f"note {n}\n", "version": version}) as response:
                    assert response.status == 200
            async with http.get(f"{base}/memory/notes.md/history") as response:
                assert response.status == 401  # the token is required
            async with http.get(f"{base}/memory/notes.md/history", headers=auth) as response:
                assert response.status == 200
                body = await response.json()
            async with http.get(f"{base}/memory/missing.md/history", headers=auth) as response:
                assert response.status == 404
        data = body["data"]
        assert (data["filename"], data["version"]) == ("memory/notes.md", 4)
        assert [(v["version"], v["content"], v["change"], v["current"]) for v in data["versions"]] == [
            (4, "note 4\n", "api", True), (3, "note 3\n", "api", False), (2, "note 2\n", "api", False)]


async def test_a_seeded_file_that_never_changed_has_its_first_version_in_history(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as bot:
        api = bot.services.api
        assert api is not None
        url = f"http://127.0.0.1:{api.port}/api/v1/memory/1/files/SOUL.md"
        auth = {"Authorization": f"Bearer {api.token}"}
        seed = await bot.rt.core.workspace.get(1, "SOUL.md")
        assert seed is not None and seed.version == 1
        assert rows(bot, "SELECT COUNT(*) FROM mate_workspace_file_history WHERE file_id = ?", (seed.id,)) == [(0,)]
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/history", headers=auth) as response:
                before = (await response.json())["data"]["versions"]
            why = await bot.say("/memory why never pretend to remember")
            async with http.put(url, headers=auth, json={"content": "# Who you are\n\nBrief.\n", "version": 1}):
                pass
            async with http.get(f"{url}/history", headers=auth) as response:
                after = (await response.json())["data"]["versions"]
    first = {"version": 1, "change": "import", "runId": None, "createTime": seed.update_time,
             "content": seed.content, "fileSize": seed.file_size}
    assert before == [{**first, "current": True}]
    when = parse_iso(seed.create_time).strftime("%Y-%m-%d %H:%M")  # the configured zone is UTC
    assert why == (f'"never pretend to remember" came into SOUL.md on {when}: '
                   "imported, or there before history began.")
    # What the listing showed is what history keeps once the file changes.
    assert [v["version"] for v in after] == [2, 1] and after[1] == {**first, "current": False}


async def test_incognito_messages_stay_in_context_only_and_go_at_the_end(tmp_path: Path) -> None:
    async with running_bot(tmp_path, **{"auto-summarize-enabled": False}) as bot:
        assert await bot.say("I adopted a cat named Miso") == "ok"
        assert await bot.say("/incognito on") == bot.prompts.text("incognito_on", hours="24")
        assert "Incognito: on since" in await bot.say("/status")
        bot.chat_replies.append(ToolUseReply("write_workspace_memory_file",
                                             {"filename": "memory/codes.md", "content": "locker: pineapple42"}))
        assert await bot.say("my locker code is pineapple42, write it down") == "ok"
        tool_result = json.dumps(bot.llm.messages_requests()[-1]["messages"][-1])
        assert "incognito" in tool_result and await bot.rt.core.workspace.get(1, "memory/codes.md") is None
        bot.chat_replies.append(ToolUseReply("schedule_task", {"message": "change the locker code",
                                                               "at": "2099-01-01T09:00:00"}))
        # The tool refused (incognito) and the model said "ok": the reply says it did not happen (S34).
        reminded = await bot.say("remind me to change the locker code")
        assert "no reminders are scheduled" in reminded
        assert "no reminders" in json.dumps(bot.llm.messages_requests()[-1]["messages"][-1])
        assert rows(bot, "SELECT COUNT(*) FROM mate_cron_job WHERE task_type = 'reminder'") == [(0,)]
        assert await bot.say("what was my locker code?") == "ok"
        chat = bot.llm.messages_requests()[-1]
        assert "pineapple42" in json.dumps(chat["messages"])  # kept for the conversation's context

        bot.memory_replies.append({"daily_entry": "ECHO", "memory_update": "# Core memory\n\n- Has a cat, Miso"})
        await bot.say("/memory summarize", answers=2)  # the receipt and the answer: memory still works meanwhile
        await bot.until(lambda: bot.receipts() == ["Noted: Has a cat, Miso (MEMORY.md)\n/undo to take it back"],
                        "the receipt of the summary")
        (extraction,) = bot.memory_requests()
        assert "Miso" in json.dumps(extraction.body) and "pineapple42" not in json.dumps(extraction.body)
        daily = [f for f in await bot.rt.core.workspace.list(1, "memory/")]
        assert len(daily) == 1 and "Miso" in daily[0].content and "pineapple42" not in daily[0].content
        assert not (await bot.rt.search.search(1, "pineapple42"))["results"]
        assert not rows(bot, "SELECT rowid FROM mate_search_trigram WHERE body LIKE '%pineapple42%'")
        around_miso = await bot.rt.search.search(1, "Miso")
        assert around_miso["results"]  # the rest is indexed as ever
        assert "locker" not in json.dumps(around_miso)  # and what came after it is not shown as its context

        assert await bot.say("/incognito off") == bot.prompts.text("incognito_off", count=3)
        assert rows(bot, "SELECT COUNT(*) FROM mate_message WHERE content LIKE '%pineapple42%' "
                         "OR content LIKE '%locker code%'") == [(0,)]
        assert rows(bot, "SELECT COUNT(*) FROM mate_message WHERE content LIKE '%Miso%'") == [(1,)]
        assert "Incognito: off" in await bot.say("/status")
        assert await bot.say("/incognito off") == bot.prompts.text("incognito_already_off")


async def test_incognito_ends_at_new_and_after_its_hours(tmp_path: Path) -> None:
    async with running_bot(tmp_path, **{"auto-summarize-enabled": False}) as bot:
        await bot.say("/incognito on")
        await bot.say("a secret about the garden")
        await bot.say("/new")
        assert rows(bot, "SELECT COUNT(*) FROM mate_message WHERE content LIKE '%garden%'") == [(0,)]
        assert rows(bot, "SELECT COUNT(*) FROM mate_incognito") == [(0,)]
        await bot.say("/incognito on")
        await bot.say("a secret about the attic")
        with closing(sqlite3.connect(bot.rt.core.config.mate.database.path, timeout=5)) as conn, conn:
            conn.execute("UPDATE mate_incognito SET start_time = '2000-01-01T00:00:00.000+00:00'")
        from bot.conversation.incognito import IncognitoExpiry

        expiry = IncognitoExpiry(bot.rt.core.repos.incognito, 24, bot.rt.window.forget)
        assert await expiry.expire() == 1
        assert rows(bot, "SELECT COUNT(*) FROM mate_message WHERE content LIKE '%attic%'") == [(0,)]


async def test_receipts_in_chinese(tmp_path: Path) -> None:
    async with running_bot(tmp_path, locale="zh-CN") as bot:
        bot.memory_replies.append({"profile_update": "# 用户资料\n\n- 住在里斯本（上个月搬来）"})
        await bot.say("我上个月搬到了里斯本")
        await bot.until(lambda: bool(bot.receipts()), "the receipt")
        assert bot.receipts() == ["已记下：住在里斯本（上个月搬来）（PROFILE.md）\n发送 /undo 可撤回"]



async def test_a_reviewed_consolidation_waits_for_approve_and_is_refused_after_an_edit(tmp_path: Path) -> None:
    async with running_bot(tmp_path, **{"emergence-review": True, "auto-summarize-enabled": False}) as bot:
        workspace = bot.rt.core.workspace
        await workspace.write(1, "memory/2026-12-01.md", "# 2026-12-01\n\n- likes green tea\n")
        assert await bot.say("hello") == "ok"  # the owner's direct chat, where proposals go
        seed = await bot.file("MEMORY.md")
        bot.memory_replies.append({"memory_content": "# Core memory\n\n- Likes green tea\n"})
        assert await bot.say("/memory emerge", answers=2) == bot.prompts.text("proposal_made")
        proposal = bot.sent()[-2]  # sent to the owner's chat before the command's answer
        assert "proposes this change" in proposal
        assert "+- Likes green tea" in proposal and "-_Nothing recorded yet._" in proposal
        assert await bot.file("MEMORY.md") == seed  # nothing written before the approval

        assert await bot.say("/memory approve") == bot.prompts.text("proposal_approved")
        assert await bot.file("MEMORY.md") == "# Core memory\n\n- Likes green tea\n"
        latest = (await bot.rt.core.repos.file_history.recent(1, 1, "MEMORY.md"))[0]
        assert (latest.change, latest.run_id is not None) == ("emergence", True)
        assert await bot.say("/memory approve") == bot.prompts.text("proposal_none")

        # A proposal made before MEMORY.md was edited is refused, and the edit stays.
        bot.memory_replies.append({"memory_content": "# Core memory\n\n- Likes tea\n"})
        await bot.say("/memory emerge", answers=2)
        api = bot.services.api
        assert api is not None
        async with aiohttp.ClientSession() as http:
            auth = {"Authorization": f"Bearer {api.token}"}
            base = f"http://127.0.0.1:{api.port}/api/v1/memory/1"
            async with http.get(f"{base}/proposal", headers=auth) as response:
                waiting = (await response.json())["data"]["proposal"]
            assert waiting["content"] == "# Core memory\n\n- Likes tea\n" and waiting["reason"]
            _, version = await workspace.read_text(1, "MEMORY.md")
            async with http.put(f"{base}/files/MEMORY.md", headers=auth,
                                json={"content": "# Core memory\n\n- Likes oolong\n", "version": version}) as r:
                assert r.status == 200
        stale = await bot.say("/memory approve")
        assert stale.startswith("MEMORY.md changed after the proposal was made (")
        assert await bot.file("MEMORY.md") == "# Core memory\n\n- Likes oolong\n"

        # Rejected, and expired after 48 hours: neither is applied.
        bot.memory_replies.append({"memory_content": "# Core memory\n\n- Likes coffee\n"})
        await bot.say("/memory emerge", answers=2)
        assert await bot.say("/memory reject") == bot.prompts.text("proposal_rejected")
        bot.memory_replies.append({"memory_content": "# Core memory\n\n- Likes cocoa\n"})
        await bot.say("/memory emerge", answers=2)
        with closing(sqlite3.connect(bot.rt.core.config.mate.database.path, timeout=5)) as conn, conn:
            conn.execute("UPDATE mate_memory_proposal SET expire_time = '2000-01-01T00:00:00.000+00:00' "
                         "WHERE status = 'pending'")
        assert await bot.say("/memory approve") == bot.prompts.text("proposal_none")
        assert await bot.file("MEMORY.md") == "# Core memory\n\n- Likes oolong\n"
        # Rejected on the page while the chat's approve was on its way: the approve changes nothing.
        bot.memory_replies.append({"memory_content": "# Core memory\n\n- Likes mate\n"})
        await bot.say("/memory emerge", answers=2)
        late = await bot.rt.core.repos.proposals.pending(1, "2000-01-01T00:00:00.000+00:00")
        assert late is not None and await bot.rt.core.repos.proposals.set_status(late.id, "rejected")
        assert not await bot.rt.core.repos.proposals.apply(late, 50)
        assert await bot.file("MEMORY.md") == "# Core memory\n\n- Likes oolong\n"
        assert [r[0] for r in rows(bot, "SELECT status FROM mate_memory_proposal ORDER BY id")] == [
            "approved", "stale", "rejected", "expired", "rejected"]
        # Another agent's proposal (a friend's, say) is answered from the owner's chat with its id.
        assert await bot.rt.core.repos.agents.ensure(2, "Mate for Ann")
        await bot.rt.core.workspace.write(2, "MEMORY.md", "# Core memory\n")
        memory_two = await bot.rt.core.workspace.get(2, "MEMORY.md")
        assert memory_two is not None and bot.rt.memory_services is not None
        review = bot.rt.memory_services.review
        assert review is not None
        await review.propose(2, "MEMORY.md", memory_two.version, memory_two.content, "# Core memory\n\n- Ann bakes\n",
                             "a new fact", None)
        await bot.until(lambda: "/memory approve 2" in bot.sent()[-1], "the proposal, naming its agent")
        assert "Mate for Ann's MEMORY.md" in bot.sent()[-1]
        assert await bot.say("/memory approve 2") == bot.prompts.text("proposal_approved")
        assert (await bot.rt.core.workspace.read_text(2, "MEMORY.md"))[0] == "# Core memory\n\n- Ann bakes\n"


async def test_the_nightly_review_proposes_too_when_consolidation_is_reviewed(tmp_path: Path) -> None:
    """The seeded nightly job runs the agent with its memory tool, which would write MEMORY.md
    at once: under review it goes through the consolidation, which proposes."""
    async with running_bot(tmp_path, **{"emergence-review": True, "auto-summarize-enabled": False}) as bot:
        await bot.rt.core.workspace.write(1, "memory/2026-12-01.md", "# 2026-12-01\n\n- likes green tea\n")
        assert await bot.say("hello") == "ok"  # the owner's direct chat, where proposals go
        seed = await bot.file("MEMORY.md")
        services = bot.rt.memory_services
        assert services is not None
        [job] = [j for j in await bot.rt.core.repos.tasks.system_tasks(1) if j.name == EMERGENCE_JOB_NAME]
        assert job.kind == "text"
        bot.memory_replies.append({"memory_content": "# Core memory\n\n- Likes green tea\n"})
        await SystemTaskRunner(bot.rt.router, services.emergence, bot.rt.consolidation_turns,
                                  bot.rt.core.repos.search_index)(job)
        await bot.until(lambda: any("proposes this change" in m for m in bot.sent()), "the proposal")
        assert await bot.file("MEMORY.md") == seed
        assert [r[0] for r in rows(bot, "SELECT status FROM mate_memory_proposal")] == ["pending"]
        assert await bot.say("/memory approve") == bot.prompts.text("proposal_approved")
        assert await bot.file("MEMORY.md") == "# Core memory\n\n- Likes green tea\n"


async def test_the_nightly_review_does_not_run_when_consolidation_is_off(tmp_path: Path) -> None:
    async with running_bot(tmp_path, **{"emergence-enabled": False, "auto-summarize-enabled": False}) as bot:
        services = bot.rt.memory_services
        assert services is not None
        [job] = [j for j in await bot.rt.core.repos.tasks.system_tasks(1) if j.name == EMERGENCE_JOB_NAME]
        seed = await bot.file("MEMORY.md")
        bot.chat_replies.append(ToolUseReply("write_workspace_memory_file",
                                             {"filename": "MEMORY.md", "content": "# Core memory\n\n- Likes tea\n"}))
        await SystemTaskRunner(bot.rt.router, services.emergence, bot.rt.consolidation_turns,
                                  bot.rt.core.repos.search_index)(job)
        assert bot.llm.messages_requests() == []
        assert await bot.file("MEMORY.md") == seed
        assert rows(bot, "SELECT COUNT(*) FROM mate_memory_run") == [(0,)]


async def test_the_nightly_reviews_writes_are_recorded_as_its_consolidation(tmp_path: Path) -> None:
    """What the agent writes with its memory tool in the nightly review's turn is that night's
    consolidation in the history (with its run); the same tool in a chat stays a tool write."""
    async with running_bot(tmp_path, **{"auto-summarize-enabled": False}) as bot:
        services = bot.rt.memory_services
        assert services is not None
        [job] = [j for j in await bot.rt.core.repos.tasks.system_tasks(1) if j.name == EMERGENCE_JOB_NAME]
        bot.chat_replies.append(ToolUseReply("write_workspace_memory_file",
                                             {"filename": "MEMORY.md", "content": "# Core memory\n\n- Likes tea\n"}))
        await SystemTaskRunner(bot.rt.router, services.emergence, bot.rt.consolidation_turns,
                                  bot.rt.core.repos.search_index)(job)
        bot.chat_replies.append(ToolUseReply("edit_workspace_memory_file",
                                             {"filename": "MEMORY.md", "oldText": "tea", "newText": "green tea"}))
        assert await bot.say("I like green tea, write it down") == "ok"

        history = await bot.rt.core.repos.file_history.recent(1, 5, "MEMORY.md")
        assert [(h.change, h.run_id is not None) for h in history[:2]] == [("tool", False), ("emergence", True)]
        [(run_id, status, chat)] = rows(bot, "SELECT id, status, conversation_id FROM mate_memory_run "
                                             "WHERE kind = 'emergence'")
        assert (history[1].run_id, status, str(chat).startswith("cron:")) == (run_id, "completed", True)
        assert await bot.file("MEMORY.md") == "# Core memory\n\n- Likes green tea\n"


async def test_a_nightly_review_the_model_could_not_do_is_recorded_as_failed(tmp_path: Path) -> None:
    """"Too long" even after the emergency retry is an answer to nobody: the run says failed."""
    too_long = ErrorReply(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")
    async with running_bot(tmp_path, **{"auto-summarize-enabled": False}) as bot:
        services = bot.rt.memory_services
        assert services is not None
        [job] = [j for j in await bot.rt.core.repos.tasks.system_tasks(1) if j.name == EMERGENCE_JOB_NAME]
        bot.chat_replies.extend([too_long, too_long])
        await SystemTaskRunner(bot.rt.router, services.emergence, bot.rt.consolidation_turns,
                                  bot.rt.core.repos.search_index)(job)
        [(status, reason)] = rows(bot, "SELECT status, reason FROM mate_memory_run WHERE kind = 'emergence'")
    assert status == "failed" and reason == bot.prompts.text("prompt_too_long")[:200]


async def test_a_search_index_that_cannot_be_merged_does_not_fail_the_nightly_job(tmp_path: Path) -> None:
    class Unmergeable:
        async def merge(self) -> None:
            raise sqlite3.OperationalError("database or disk is full")

    async with running_bot(tmp_path, **{"auto-summarize-enabled": False}) as bot:
        services = bot.rt.memory_services
        assert services is not None
        [job] = [j for j in await bot.rt.core.repos.tasks.system_tasks(1) if j.name == EMERGENCE_JOB_NAME]
        runner = SystemTaskRunner(bot.rt.router, services.emergence, bot.rt.consolidation_turns,
                                     Unmergeable())  # type: ignore[arg-type]
        await runner(job)
        await runner(replace(job, kind="emergence"))
        statuses = rows(bot, "SELECT status FROM mate_memory_run WHERE kind = 'emergence' ORDER BY id")
    assert statuses[0] == ("completed",)


async def test_receipts_follow_the_setting_in_groups_and_when_off(tmp_path: Path) -> None:
    fact = {"memory_update": "# Core memory\n\n- The group meets on Fridays"}
    for mode, group_gets_one in (("direct", False), ("all", True)):
        async with running_bot(tmp_path / mode, receipts=mode) as bot:
            bot.memory_replies.append(fact)
            bot.tg.push_text("we meet on Fridays from now on", chat_id=-100, user_id=FRIEND, chat_type="group",
                             reply_to_bot=True)
            await bot.until(lambda: bool(bot.sent(-100)), "the group's answer")
            await bot.settled(1)
            group = await bot.rt.core.repos.conversations.get("tg:-100")
            assert group is not None and "Fridays" in await bot.file("MEMORY.md", group.agent_id)
            assert bool(bot.receipts(-100)) is group_gets_one
    async with running_bot(tmp_path / "off", receipts="off") as bot:
        bot.memory_replies.append(LISBON)
        await bot.say("I moved to Lisbon last month")
        await bot.settled(1)
        assert "Lisbon" in await bot.file("PROFILE.md") and bot.receipts() == []


async def test_undo_never_deletes_a_file_whose_earlier_version_is_no_longer_kept(tmp_path: Path) -> None:
    async with running_bot(tmp_path, **{"history-versions": 1}) as bot:
        bot.memory_replies.append({"profile_update": LISBON["profile_update"]})
        await bot.say("I moved to Lisbon last month")
        await bot.until(lambda: bool(bot.receipts()), "the receipt")
        profile = await bot.file("PROFILE.md")
        assert await bot.say("/undo") == bot.prompts.text("undo_not_kept", filename="PROFILE.md")
        assert await bot.file("PROFILE.md") == profile


async def test_why_says_so_when_the_versions_before_the_text_were_pruned(tmp_path: Path) -> None:
    async with running_bot(tmp_path, **{"history-versions": 2, "auto-summarize-enabled": False}) as bot:
        for lines in (["- Likes oolong tea"], ["- Likes oolong tea", "- Runs"], ["- Likes oolong tea", "- Runs", "- Swims"]):
            await bot.rt.core.workspace.write(1, "MEMORY.md", "# Core memory\n\n" + "\n".join(lines) + "\n")
        pruned = await bot.say("/memory why oolong")
        await bot.rt.core.workspace.write(1, "MEMORY.md", "# Core memory\n\n- Swims\n- Likes jazz\n")
        kept = await bot.say("/memory why jazz")
    assert "the oldest version still kept" in pruned and "came into" not in pruned
    assert kept.startswith('"jazz" came into MEMORY.md on ')


@pytest.mark.parametrize(("written", "answer"), [
    (1, "Incognito is off. The message you wrote meanwhile, and my answer, were deleted."),
    (2, "Incognito is off. The 2 messages you wrote meanwhile, and my answers, were deleted."),
])
async def test_incognito_off_says_how_many_messages_went_in_good_english(
    tmp_path: Path, written: int, answer: str,
) -> None:
    async with open_runtime(make_config(tmp_path), with_memory_worker=False) as rt:
        async def say(text: str) -> str:
            reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", text, is_admin=True))
            assert reply is not None
            return reply.text

        await say("/incognito on")
        for n in range(written):
            await say(f"a secret, number {n}")
        assert await say("/incognito off") == answer
