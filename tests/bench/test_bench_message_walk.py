"""bench/message_walk.py: one message's walk from the Telegram adapter to its reply, counted."""

from __future__ import annotations

import json

import pytest

from bench import message_walk
from tests.support.import_graph import LAYERS


def test_the_walk_goes_from_the_adapter_through_the_router_and_the_model_client(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = message_walk.main([])
    assert json.loads(capsys.readouterr().out.strip()) == result
    path = result["path"]
    assert path[0] == "channels.telegram.adapter"
    for module in ("bot.conversation.router", "bot.conversation.agent", "bot.llm.anthropic", "bot.storage.database"):
        assert module in path
    assert result["modules"] == len(path) and result["stays"] > result["modules"]
    assert isinstance(result["climbs"], int)  # every module entered is in a layer


def test_the_bench_counts_climbs_by_the_layout_rule_the_tests_check() -> None:
    assert message_walk.LAYERS is LAYERS
    assert message_walk.layer_of("bot.schedule.timer") == 5
    assert message_walk.layer_of("bot.conversation.router") > message_walk.layer_of("bot.llm.port")  # type: ignore[operator]
