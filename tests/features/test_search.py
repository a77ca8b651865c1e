"""The search feature over a real database: its JSON result and its lines; and /memory search, the
CLI and the API finding the same for the same data."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import aiohttp
import pytest

from bot.app.api.server import ApiServer
from bot.app.cli.memory import memory_search
from bot.app.core import Core
from bot.app.runtime import open_runtime
from bot.features.search import SearchFeature
from channels.base import InboundMessage
from memory.recall.search import MAX_QUERY_CHARS, MemorySearchService, SearchQueryRefused
from tests.support.config import make_config

NOTE = "- the spare key is under the blue pot\n"


@pytest.fixture
def searches(core: Core) -> SearchFeature:
    return SearchFeature(MemorySearchService(core.repos.search), core.prompts)


async def test_a_blank_query_is_the_usage_and_a_refused_one_says_why(core: Core, searches: SearchFeature) -> None:
    t = core.prompts.text
    assert await searches.text(1, " \t") == t("search_usage")
    assert await searches.text(1, "a\x00b") == t("search_query_control", character="U+0000")
    too_long = "x" * (MAX_QUERY_CHARS + 1)
    assert await searches.text(1, too_long) == t("search_query_too_long", length=MAX_QUERY_CHARS + 1,
                                                 limit=MAX_QUERY_CHARS)
    with pytest.raises(SearchQueryRefused):
        await searches.search(1, too_long)


async def test_a_hit_is_a_line_naming_its_file_and_no_hit_says_so(core: Core, searches: SearchFeature) -> None:
    t = core.prompts.text
    await core.workspace.write(1, "NOTES.md", NOTE)

    result = await searches.search(1, "spare key")
    lines = (await searches.text(1, "spare key")).splitlines()

    assert result["results"][0]["filename"] == "NOTES.md"  # the seeded files may hold "key" too
    assert lines[0] == t("search_header", count=result["count"], query="spare key") and "NOTES.md" in lines[1]
    assert len(lines) == 1 + result["count"]
    assert await searches.text(1, "zebra") == t("search_none", query="zebra")
    assert "NOTES.md" not in [hit.get("filename") for hit in (await searches.search(2, "spare key"))["results"]]


async def test_chat_cli_and_api_find_the_same(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = make_config(tmp_path, llm={"provider": "offline"}, api={"port": 0, "token": ""})
    async with open_runtime(config, with_memory_worker=False) as rt, \
            ApiServer(rt, config.mate.api) as server, aiohttp.ClientSession() as http:
        await rt.core.workspace.write(1, "NOTES.md", NOTE)
        async with http.get(f"http://127.0.0.1:{server.port}/api/v1/memory/1/search", params={"q": "spare key"}) as r:
            api_result = (await r.json())["data"]
        reply = await rt.router.handle(InboundMessage("console", "me", "me", "me", "/memory search spare key",
                                                      is_admin=True))
        capsys.readouterr()
        for as_json in (False, True):
            assert await memory_search(config, argparse.Namespace(agent=1, limit=5, json=as_json,
                                                                  query=["spare", "key"])) == 0
        cli_text, cli_json = capsys.readouterr().out.split("\n{", 1)

    assert json.loads("{" + cli_json) == api_result and api_result["results"][0]["filename"] == "NOTES.md"
    assert reply is not None and reply.text == cli_text
