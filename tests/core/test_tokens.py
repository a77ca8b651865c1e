"""TokenEstimator: exact offline tiktoken counts, the rough fallback and per-model calibration (SPEC S5)."""

from __future__ import annotations

import json

import pytest

from bot.llm.tokens import PER_MESSAGE_OVERHEAD, TokenEstimator


@pytest.fixture(scope="module")
def exact() -> TokenEstimator:
    return TokenEstimator()


@pytest.fixture
def rough() -> TokenEstimator:
    return TokenEstimator(encoder=None)


def test_tiktoken_cl100k_loads_offline(exact: TokenEstimator) -> None:
    assert exact.exact is True
    assert exact.count_text("hello world") == 2
    assert exact.count_text("") == 0
    assert exact.count_text("<|endoftext|>") > 1  # special tokens are counted as plain text, never rejected


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("abcd", 1),
        ("abcdefgh", 2),
        ("abcdefghi", 3),  # rounds up
        ("你好世界", 4),  # CJK ~1 token per character
        ("こんにちは", 5),
        ("안녕", 2),
        ("你好 abcd", 4),  # 2 wide + ceil(5 / 4)
    ],
)
def test_fallback_counts_cjk_per_char_and_other_text_per_four_chars(
    rough: TokenEstimator, text: str, tokens: int,
) -> None:
    assert rough.exact is False
    assert rough.count_text(text) == tokens


def test_content_blocks_and_tools_are_counted(rough: TokenEstimator) -> None:
    tool_input = {"agentId": 1, "filename": "PROFILE.md"}
    blocks = [
        {"type": "text", "text": "abcdefgh"},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": tool_input},
    ]
    expected = 2 + rough.count_text("read") + rough.count_text(json.dumps(tool_input))
    assert rough.count_content(blocks) == expected
    assert rough.count_message(blocks) == expected + PER_MESSAGE_OVERHEAD
    result = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "abcdefgh" * 3}]
    assert rough.count_content(result) == 6
    nested = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "abcd"}]}]
    assert rough.count_content(nested) == 1
    tool = {"name": "t", "description": "d", "input_schema": {"type": "object"}}
    assert rough.count_tools([tool, tool]) == 2 * rough.count_text(json.dumps(tool))


def test_calibration_is_an_ema_per_model(rough: TokenEstimator) -> None:
    assert rough.factor("m") == 1.0
    rough.observe("m", 100, 300)
    assert rough.factor("m") == pytest.approx(1.6)
    rough.observe("m", 100, 300)
    assert rough.factor("m") == pytest.approx(2.02)
    assert rough.factor("other") == 1.0
    assert rough.calibrated("m", 100) == 202
    assert rough.calibrated("other", 100) == 100


def test_calibration_ignores_empty_usage_and_clamps_outliers(rough: TokenEstimator) -> None:
    rough.observe("m", 100, 0)
    rough.observe("m", 0, 100)
    assert rough.factor("m") == 1.0
    rough.observe("m", 10, 1_000_000)  # ratio clamped to 4
    assert rough.factor("m") == pytest.approx(1.9)
    rough.observe("n", 1_000_000, 1)  # a server that counted only its cache misses: ignored
    assert rough.factor("n") == 1.0
    rough.observe("n", 100, 70)
    assert rough.factor("n") == pytest.approx(0.91)
    assert rough.calibrated("n", 10) == 10  # rounds up
