"""Replies shown as they are written: Telegram drafts and edits, through PTB and the fakes (SPEC S21)."""

from __future__ import annotations

from pathlib import Path

from tests.support.telegram_env import ADMIN, FRIEND, GROUP, running

ANSWER = " ".join(f"word{i}" for i in range(120)) + " **done**"


async def test_a_direct_chat_sees_a_growing_draft_then_the_reply(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.llm.tokens_per_s = 60.0  # about 3 s for the whole answer
        env.llm.reply_text(ANSWER)
        env.tg.push_text("tell me a lot", chat_id=ADMIN, user_id=ADMIN)
        [sent] = await env.tg.wait_for_sent(timeout=30)

    drafts = [d["text"] for d in env.tg.drafts]
    assert len(drafts) >= 2
    assert all(ANSWER.startswith(d.rstrip("…")) for d in drafts)  # plain text, growing
    assert all(len(a) < len(b) for a, b in zip(drafts, drafts[1:]))
    times = [t for t, method, _, _ in env.tg.visible if method == "sendMessageDraft"]
    # at most one update a second (sent a second apart; the arrival times carry the HTTP round trip)
    assert all(b - a >= 0.8 for a, b in zip(times, times[1:]))
    assert sent["text"].endswith("<b>done</b>") and sent["parse_mode"] == "HTML"
    assert env.tg.edits == []


async def test_a_group_sees_one_message_edited_in_place(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.llm.tokens_per_s = 60.0
        env.llm.reply_text(ANSWER)
        env.tg.push_text("@mate_bot tell me a lot", chat_id=GROUP, user_id=FRIEND, chat_type="group")
        await env.tg.wait_for_visible(lambda e: e[1] == "editMessageText" and e[3].endswith("done"), timeout=10)

    assert env.tg.drafts == []  # drafts are for direct chats only
    [preview] = env.tg.sent  # one message, the reply edits it
    assert preview["reply_parameters"]["message_id"]
    final = env.tg.edits[-1]
    assert final["parse_mode"] == "HTML" and final["text"].endswith("<b>done</b>")
    times = [t for t, method, _, _ in env.tg.visible]
    assert all(b - a >= 2.5 for a, b in zip(times[:-1], times[1:-1]))  # group previews: one every 3 s


async def test_a_preview_that_cannot_become_the_reply_is_deleted(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.llm.reply_text("A short answer.")
        env.tg.fail_next("editMessageText", error_code=400, description="Bad Request: message can't be edited")
        env.tg.push_text("@mate_bot hello", chat_id=GROUP, user_id=FRIEND, chat_type="group")
        await env.tg.wait_for_sent(2, timeout=30)

    preview, reply = env.tg.sent
    assert [d["chat_id"] for d in env.tg.deleted] == [GROUP]  # the half-shown preview went away
    assert "A short answer.".startswith(preview["text"]) and reply["text"] == "A short answer."
    methods = [method for _, method, _, _ in env.tg.visible]
    assert methods == ["sendMessage", "deleteMessage", "sendMessage"]


async def test_a_tool_round_shows_a_status_line(tmp_path: Path) -> None:
    async with running(tmp_path) as env:
        env.llm.ttft = 0.3
        env.llm.reply_tool_use("list_workspace_memory_files", {})
        env.llm.reply_text("You have four files.")
        env.tg.push_text("which files?", chat_id=ADMIN, user_id=ADMIN)
        [sent] = await env.tg.wait_for_sent(timeout=30)

    assert env.tg.drafts[0]["text"] == "Working on it…"
    assert sent["text"] == "You have four files."


# -- web: server-sent events ----------------------------------------------------------------


def _events(raw: str) -> list[tuple[str, dict]]:
    import json

    found = []
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        found.append((lines["event"], json.loads(lines["data"])))
    return found


async def test_web_stream_sends_deltas_then_one_done(tmp_path: Path) -> None:
    from tests.support.api_env import open_api

    async for api in open_api(tmp_path):
        api.fake.reply_text("Hello there, streamed in pieces.")
        async with api.http.post(api.url + "/api/v1/chat/1/stream", json={"message": "hi"},
                                 headers=api.auth()) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/event-stream")
            events = _events(await response.text())
        async with api.http.post(api.url + "/api/v1/chat/1/stream", json={"message": ""},
                                 headers=api.auth()) as response:
            bad = (response.status, await response.json())

    deltas = [data["text"] for kind, data in events if kind == "delta"]
    assert len(deltas) >= 2 and "".join(deltas) == "Hello there, streamed in pieces."
    assert [kind for kind, _ in events].count("done") == 1 and events[-1][0] == "done"
    done = events[-1][1]
    assert done["reply"] == "Hello there, streamed in pieces." and done["conversationId"].startswith("web:")
    assert bad[0] == 400  # bad input is a JSON error, before any stream starts


async def test_web_stream_that_breaks_ends_with_the_apology(tmp_path: Path) -> None:
    from tests.support.fakes.anthropic import TextReply
    from tests.support.api_env import open_api

    async for api in open_api(tmp_path):
        api.fake.push(TextReply("A first part, then the line went dead for good.", break_after_chars=8))
        async with api.http.post(api.url + "/api/v1/chat/1/stream", json={"message": "hi"},
                                 headers=api.auth()) as response:
            events = _events(await response.text())

    shown = "".join(data["text"] for kind, data in events if kind == "delta")
    kind, done = events[-1]
    assert kind == "done" and done["failure"] == "llm"
    assert shown and done["reply"].startswith(shown.strip()) and "broke off" in done["reply"]


async def test_web_stream_ends_properly_when_the_router_fails(tmp_path: Path) -> None:
    from tests.support.api_env import open_api

    async for api in open_api(tmp_path):
        async def broken(message, *, agent_id=None, stream=None):  # type: ignore[no-untyped-def]
            stream.text("half")
            raise RuntimeError("unexpected")

        api.rt.router.handle = broken  # type: ignore[method-assign]
        async with api.http.post(api.url + "/api/v1/chat/1/stream", json={"message": "hi"},
                                 headers=api.auth()) as response:
            events = _events(await response.text())  # returns: the stream was closed

    assert events[0] == ("delta", {"text": "half"})
    kind, done = events[-1]
    assert kind == "done" and done["failure"] == "llm" and done["reply"]


# -- console --------------------------------------------------------------------------------


async def test_console_prints_the_answer_as_it_arrives(tmp_path: Path) -> None:
    import asyncio
    import io

    from channels.console import ConsoleChannel
    from tests.support.fakes.anthropic import FakeAnthropic, TextReply
    from tests.support.runtime import running as pipeline

    writes: list[str] = []

    class Output(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return super().write(text)

    output = Output()
    async with FakeAnthropic() as fake, pipeline(tmp_path, fake) as rt:
        fake.reply_text("First streamed answer, in pieces.")
        fake.push(TextReply("Half of it and then", break_after_chars=5))
        fake.reply_text("  Spaced answer.\n\n")  # models often end with blank lines

        async def handle(message, stream):  # type: ignore[no-untyped-def]
            reply = await rt.router.handle(message, stream=stream)
            return reply.text if reply else None

        reader = asyncio.StreamReader()
        reader.feed_data(b"hello\nmore\nthird\n")
        reader.feed_eof()
        await ConsoleChannel(handle, reader=reader, output=output, user="me").run()

    text = output.getvalue()
    assert "you> First streamed answer, in pieces.\n" in text  # printed once, not again at the end
    assert text.count("First streamed answer") == 1
    assert sum(1 for w in writes if w and w in "First streamed answer, in pieces.") >= 2  # in pieces
    assert "broke off" in text and text.count("Half") == 1
    assert text.count("Spaced answer.") == 1


def test_console_prints_what_a_reply_opens_with_after_the_streamed_answer_not_the_answer_again() -> None:
    from channels.console import _Printed

    lines: list[str] = []

    def write(text: str, newline: bool = True) -> None:
        lines.append(text + ("\n" if newline else ""))

    printed = _Printed(write)
    printed.text("The answer, ")
    printed.text("streamed.")
    printed.finish("(I missed a reminder: call mum)\n\nThe answer, streamed.")
    out = "".join(lines)
    assert out.count("The answer, streamed.") == 1
    assert out == "The answer, streamed.\n(I missed a reminder: call mum)\n"


# -- Discord ------------------------------------------------------------------------------


async def test_discord_edits_one_message_in_place(tmp_path: Path) -> None:
    from tests.support.discord_env import open_env

    async for env in open_env(tmp_path, stream=True):
        env.fa.tokens_per_s = 60.0
        env.fa.reply_text(ANSWER)
        incoming = await env.dc.send_guild_message("tell me a lot", mention_bot=True)
        await env.dc.wait_for(lambda: any(e.get("content", "").endswith("**done**") for e in env.dc.edited_messages),
                              timeout=10)
        sent, edits = list(env.dc.sent_messages), list(env.dc.edited_messages)

    [preview] = sent  # one message, quoting the question, edited as the answer grows
    assert str(preview["message_reference"]["message_id"]) == incoming["id"]
    assert ANSWER.startswith(preview["content"])
    assert len(edits) >= 2 and edits[-1]["content"] == ANSWER
    assert all(ANSWER.startswith(e["content"].rstrip("…")) for e in edits)
