"""Whose reminders are whose: one chat never sees or cancels another's tasks, on Telegram and Discord
alike, and in a group only those who may schedule get the tools (SPEC S27)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.schedule.reminders.tool import CANCEL_TOOL, LIST_TOOL, SCHEDULE_TOOL
from tests.support.fakes.anthropic import RecordedRequest, TextReply, ToolUseReply
from tests.support.tasks_env import FRIEND, GROUP, MEMBER, OWNER, OWNER_DC, World, tool_names, tool_results, world


def results_of(requests: list[RecordedRequest]) -> list[tuple[dict[str, Any], bool]]:
    return [(json.loads(block["content"]), bool(block.get("is_error")))
            for recorded in requests for block in tool_results(recorded)]


async def live_tasks(w: World) -> list[tuple[int, str]]:
    return [(task.id, task.message) for task in await w.rt.tasks.for_agent(None)]


async def test_two_chats_cannot_see_or_cancel_each_others_tasks(tmp_path: Path) -> None:
    async with world(tmp_path, discord_too=True) as w:
        assert w.dc is not None
        w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "water the plants", "cron": "0 18 * * *"}))
        w.llm.push(TextReply("Every evening at six."))
        await w.tell(FRIEND, "remind me every evening to water the plants")
        [(friends_task, _)] = await live_tasks(w)

        seen_before = len(w.chats())
        w.llm.push(ToolUseReply(LIST_TOOL, {}))
        w.llm.push(ToolUseReply(CANCEL_TOOL, {"taskId": friends_task}))
        w.llm.push(TextReply("Nothing here."))
        await w.tell(OWNER, "what reminders do I have? cancel them all")
        owner_results = results_of(w.chats()[seen_before:])
        assert owner_results == [({"count": 0, "tasks": []}, False),
                                 ({"error": f"no task {friends_task} in this chat"}, True)]
        assert await w.tell(OWNER, "/tasks") == "No reminders or scheduled tasks in this chat."
        assert await w.tell(OWNER, f"/tasks cancel {friends_task}") == f"There is no task #{friends_task} in this chat."

        # The owner's Discord DM is another chat: the same answers there.
        seen_before = len(w.chats())
        w.llm.push(ToolUseReply(LIST_TOOL, {}))
        w.llm.push(ToolUseReply(CANCEL_TOOL, {"taskId": friends_task}))
        w.llm.push(TextReply("Nothing on Discord."))
        await w.dc.send_dm("my reminders? cancel them", author_id=OWNER_DC, username="olga")
        await w.dc.wait_sent(1, timeout=15)
        assert results_of(w.chats()[seen_before:]) == owner_results

        assert await live_tasks(w) == [(friends_task, "water the plants")]
        listing = await w.tell(FRIEND, "/tasks")
        assert f"#{friends_task}" in listing and "water the plants" in listing and "0 18 * * *" in listing
        assert await w.tell(FRIEND, f"/tasks cancel {friends_task}") == f"Cancelled task #{friends_task}."
        assert await live_tasks(w) == []


async def test_a_group_member_without_permission_gets_a_clear_refusal(tmp_path: Path) -> None:
    refusal = "Only the admins can schedule or cancel reminders in this group."
    async with world(tmp_path) as w:
        w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "stand-up", "cron": "0 10 * * 1-5"}))
        w.llm.push(TextReply("Scheduled."))
        await w.tell(GROUP, "remind us of the stand-up on weekdays at 10", user_id=OWNER, group=True, name="Olga")
        assert SCHEDULE_TOOL in tool_names(w.chats()[0])  # the bot's admin may schedule in a group
        [(task_id, _)] = await live_tasks(w)

        seen_before = len(w.chats())
        # The model saw the tools used in this chat and calls one anyway: it is told why not.
        w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "lunch", "cron": "0 12 * * *"}))
        w.llm.push(ToolUseReply(CANCEL_TOOL, {"taskId": task_id}))
        w.llm.push(TextReply(refusal))
        await w.tell(GROUP, "remind us of lunch at noon, and drop the stand-up", user_id=MEMBER, group=True,
                     name="Mo")
        member_turn = w.chats()[seen_before]
        assert not {SCHEDULE_TOOL, LIST_TOOL, CANCEL_TOOL} & set(tool_names(member_turn))  # not offered
        assert results_of(w.chats()[seen_before:]) == [({"error": refusal}, True)] * 2

        assert await w.tell(GROUP, f"/tasks cancel {task_id}", user_id=MEMBER, group=True, name="Mo") == refusal
        listing = await w.tell(GROUP, "/tasks", user_id=MEMBER, group=True, name="Mo")
        assert "stand-up" in listing  # anyone in the group may read the group's tasks
        assert await live_tasks(w) == [(task_id, "stand-up")]


async def test_group_members_may_schedule_when_the_owner_allows_it(tmp_path: Path) -> None:
    async with world(tmp_path, tasks={"group-members-may-schedule": True}) as w:
        w.llm.push(ToolUseReply(SCHEDULE_TOOL, {"message": "lunch", "cron": "0 12 * * *"}))
        w.llm.push(TextReply("Lunch at noon."))
        await w.tell(GROUP, "remind us of lunch at noon", user_id=MEMBER, group=True, name="Mo")
        assert SCHEDULE_TOOL in tool_names(w.chats()[0])
        [(_, message)] = await live_tasks(w)
        assert message == "lunch"
        # A stranger in a direct chat is refused by the allowlist before any tool matters.
        assert "allowlist" in await w.tell(MEMBER, "/tasks")
