"""The Discord fake must carry a real discord.Client through login, events, replies and slash commands."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
import yarl

# discord.py's voice player imports the stdlib audioop, deprecated since 3.11; with
# filterwarnings=error that import would abort collection.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord
    import discord.gateway
    import discord.http
    from discord import app_commands

from tests.support.fakes.discord import FakeDiscord


@pytest.fixture
async def dc(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        monkeypatch.setattr(discord.http.Route, "BASE", fake.api_base)
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(fake.gateway_url))
        yield fake


def make_client(*, message_content: bool = True) -> discord.Client:
    intents = discord.Intents.default()
    intents.message_content = message_content
    # A short guild_ready_timeout skips discord.py's 2 s wait for more GUILD_CREATEs.
    return discord.Client(intents=intents, guild_ready_timeout=0.05)


Run = Callable[[discord.Client], Awaitable[None]]


@pytest.fixture
async def run(dc: FakeDiscord) -> AsyncIterator[Run]:
    """Start clients in the background and always close them, so no session or task leaks."""
    started: list[tuple[discord.Client, asyncio.Task[None]]] = []

    async def start(client: discord.Client) -> None:
        task = asyncio.create_task(client.start("TOKEN"))
        started.append((client, task))
        await dc.wait_ready()
        await asyncio.wait_for(client.wait_until_ready(), 5)

    yield start
    for client, task in started:
        await client.close()
        await task


def inbox(client: discord.Client) -> asyncio.Queue[discord.Message]:
    messages: asyncio.Queue[discord.Message] = asyncio.Queue()

    @client.event
    async def on_message(message: discord.Message) -> None:
        if message.author != client.user:
            await messages.put(message)

    return messages


async def test_login_and_ready(dc: FakeDiscord, run: Run) -> None:
    client = make_client()
    await run(client)
    assert client.user is not None and client.user.id == 900
    assert client.application_id == 900
    guild = client.get_guild(100)
    assert guild is not None and guild.name == "Test"
    assert isinstance(guild.get_channel(200), discord.TextChannel)
    assert dc.identify is not None and dc.identify["token"] == "TOKEN"
    assert dc.identify["intents"] & (1 << 15)
    # The client asks for zlib-stream but copes with the fake's plain text frames.
    assert dc.gateway_queries[0]["encoding"] == "json"
    assert [c[:2] for c in dc.rest_calls[:2]] == [("GET", "/users/@me"), ("GET", "/oauth2/applications/@me")]


async def test_rest_answers_are_exact_json(dc: FakeDiscord) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(dc.api_base + "/users/@me") as resp:
            assert resp.headers["Content-Type"] == "application/json"
            assert (await resp.json())["id"] == "900"
        async with http.get(dc.api_base + "/nope") as resp:
            assert resp.status == 404
            assert resp.headers["Content-Type"] == "application/json"
            assert await resp.json() == {"message": "Unknown", "code": 0}


async def test_guild_message_with_content_intent_and_reply(dc: FakeDiscord, run: Run) -> None:
    client = make_client()
    messages = inbox(client)
    await run(client)
    await dc.send_guild_message("hello bot")
    message = await asyncio.wait_for(messages.get(), 5)
    assert message.content == "hello bot"
    assert message.guild is not None and message.guild.id == 100
    assert isinstance(message.author, discord.Member) and message.author.name == "alice"
    async with message.channel.typing():
        reply = await message.channel.send("hi")
    assert reply.content == "hi" and reply.author == client.user
    sent = await dc.wait_sent(1)
    assert sent[0]["content"] == "hi" and sent[0]["channel_id"] == "200"
    assert dc.typing_calls == ["200"]


async def test_guild_message_blank_without_intent_unless_mentioned(dc: FakeDiscord, run: Run) -> None:
    client = make_client(message_content=False)
    messages = inbox(client)
    await run(client)
    await dc.send_guild_message("secret")
    assert (await asyncio.wait_for(messages.get(), 5)).content == ""
    await dc.send_guild_message("hey you", mention_bot=True)
    mentioned = await asyncio.wait_for(messages.get(), 5)
    assert mentioned.content == "<@900> hey you"
    assert client.user in mentioned.mentions


async def test_dm_received_and_answered(dc: FakeDiscord, run: Run) -> None:
    client = make_client(message_content=False)
    messages = inbox(client)
    await run(client)
    await dc.send_dm("private hello")
    message = await asyncio.wait_for(messages.get(), 5)
    assert message.content == "private hello"  # DMs are exempt from the content intent
    assert message.guild is None and isinstance(message.channel, discord.DMChannel)
    await message.channel.send("hi there")
    assert (await dc.wait_sent(1))[0]["channel_id"] == "300"


async def test_rate_limited_post_is_retried(dc: FakeDiscord, run: Run) -> None:
    client = make_client()
    messages = inbox(client)
    await run(client)
    await dc.send_guild_message("ping")
    message = await asyncio.wait_for(messages.get(), 5)
    dc.fail_next_post(429, {"message": "You are being rate limited."}, retry_after=0.05)
    await message.channel.send("pong")
    posts = [c for c in dc.rest_calls if c[:2] == ("POST", "/channels/200/messages")]
    assert len(posts) == 2
    assert [m["content"] for m in dc.sent_messages] == ["pong"]


async def test_rate_limit_without_via_is_an_error(dc: FakeDiscord, run: Run) -> None:
    client = make_client()
    await run(client)
    channel = client.get_channel(200)
    assert isinstance(channel, discord.TextChannel)
    dc.fail_next_post(429, {"message": "banned"}, via=False)
    with pytest.raises(discord.HTTPException):
        await channel.send("nope")
    assert dc.sent_messages == []


async def test_slash_command_sync_and_invoke(dc: FakeDiscord, run: Run) -> None:
    client = make_client()
    tree = app_commands.CommandTree(client)
    seen: list[str] = []

    @tree.command(name="ask", description="Ask the bot")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        seen.append(question)
        await interaction.response.send_message(f"you asked: {question}")

    async def setup_hook() -> None:
        await tree.sync()

    client.setup_hook = setup_hook  # type: ignore[method-assign]
    await run(client)
    assert [c["name"] for c in dc.registered_commands] == ["ask"]
    await dc.send_slash_command("ask", options=[{"name": "question", "type": 3, "value": "why?"}])
    responses = await dc.wait_interaction_responses(1)
    assert seen == ["why?"]
    assert responses[0]["type"] == 4 and responses[0]["data"]["content"] == "you asked: why?"


async def test_guild_group_command_defer_and_followup(dc: FakeDiscord, run: Run) -> None:
    client = make_client()
    tree = app_commands.CommandTree(client)
    memory = app_commands.Group(name="memory", description="Memory tools")
    guild = discord.Object(id=100)

    @memory.command(name="show", description="Show memory")
    async def show(interaction: discord.Interaction) -> None:
        await interaction.response.defer(thinking=True)
        await interaction.followup.send("nothing yet")

    tree.add_command(memory, guild=guild)

    async def setup_hook() -> None:
        await tree.sync(guild=guild)

    client.setup_hook = setup_hook  # type: ignore[method-assign]
    await run(client)
    assert dc.registered_commands[0]["guild_id"] == "100"
    await dc.send_slash_command("memory", subcommand="show")
    assert (await dc.wait_interaction_responses(1))[0]["type"] == 5
    assert (await dc.wait_followups(1))[0]["content"] == "nothing yet"


async def test_slash_command_in_dm(dc: FakeDiscord, run: Run) -> None:
    client = make_client()
    tree = app_commands.CommandTree(client)
    users: list[int] = []

    @tree.command(name="ping", description="Ping")
    async def ping(interaction: discord.Interaction) -> None:
        users.append(interaction.user.id)
        await interaction.response.send_message("pong", ephemeral=True)

    await run(client)
    await dc.send_slash_command("ping", in_dm=True)
    responses = await dc.wait_interaction_responses(1)
    assert users == [42]
    assert responses[0]["data"]["flags"] & 64


async def test_gateway_drop_resumes(dc: FakeDiscord, run: Run) -> None:
    client = make_client()
    messages = inbox(client)
    resumed = asyncio.Event()
    client.event(_set_on("on_resumed", resumed))
    await run(client)
    await dc.drop_gateway()
    await dc.wait_for(lambda: len(dc.resumes) >= 1)
    await asyncio.wait_for(resumed.wait(), 5)
    assert dc.resumes[0]["session_id"] == dc.session_id
    assert len(dc.identifies) == 1
    await dc.send_guild_message("after resume")
    assert (await asyncio.wait_for(messages.get(), 5)).content == "after resume"


async def test_invalid_session_reidentifies(dc: FakeDiscord, run: Run) -> None:
    client = make_client()
    messages = inbox(client)

    async def no_wait(shard_id: int | None, *, initial: bool = False) -> None:
        pass  # discord.py otherwise sleeps 5 s before every re-IDENTIFY

    client.before_identify_hook = no_wait  # type: ignore[method-assign]
    await run(client)
    await dc.drop_gateway(resumable=False)
    await dc.wait_for(lambda: len(dc.identifies) == 2)
    assert len(dc.resumes) == 1  # tried, refused with op 9
    await dc.send_guild_message("fresh session")
    assert (await asyncio.wait_for(messages.get(), 5)).content == "fresh session"


def _set_on(name: str, event: asyncio.Event) -> Callable[[], Awaitable[None]]:
    async def handler() -> None:
        event.set()

    handler.__name__ = name
    return handler


async def test_late_start_refuses_connections_until_listening() -> None:
    async with FakeDiscord(listening=False) as fake, aiohttp.ClientSession() as http:
        assert not fake.network_up
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(fake.api_base + "/users/@me")
        await fake.start_listening()
        async with http.get(fake.api_base + "/users/@me") as resp:
            assert resp.status == 200
        assert [c[:2] for c in fake.rest_calls] == [("GET", "/users/@me")]


async def test_dropped_network_closes_sockets_and_refuses_until_restored(dc: FakeDiscord) -> None:
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(dc.gateway_url)
        assert (await ws.receive_json())["op"] == 10  # HELLO
        async with http.get(dc.api_base + "/users/@me") as resp:  # leaves a kept-alive connection
            assert resp.status == 200
        await dc.drop_network()
        assert not dc.network_up
        closing = await asyncio.wait_for(ws.receive(), 5)
        assert closing.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSE)
        with pytest.raises(aiohttp.ClientError):  # the kept-alive connection is gone, new ones refused
            await http.get(dc.api_base + "/users/@me")
        await dc.restore_network()
        async with http.get(dc.api_base + "/users/@me") as resp:  # same port as before
            assert resp.status == 200
        await ws.close()


async def test_rejected_token_fails_login(dc: FakeDiscord) -> None:
    dc.reject_token = True
    client = make_client()
    try:
        with pytest.raises(discord.LoginFailure):
            await client.login("TOKEN")
    finally:
        await client.close()
    assert [c[:2] for c in dc.rest_calls] == [("GET", "/users/@me")]


async def test_refused_content_intent_closes_with_4014(dc: FakeDiscord) -> None:
    dc.refuse_intents = True
    client = make_client(message_content=True)
    try:
        with pytest.raises(discord.PrivilegedIntentsRequired):
            await asyncio.wait_for(client.start("TOKEN"), 5)
    finally:
        await client.close()
    assert len(dc.identifies) == 1
