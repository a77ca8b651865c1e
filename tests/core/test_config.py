from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.config import Config, expand_env, load_config, masked_dump, parse_config
from bot.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_shipped_config_yaml_equals_embedded_defaults() -> None:
    shipped = load_config(REPO / "config.yaml", environ={})
    assert shipped.model_dump() == Config().model_dump()


def test_defaults_match_spec_numbers() -> None:
    mate = Config().mate
    window = mate.agent.conversation.window
    assert (window.default_max_input_tokens, window.compact_trigger_ratio) == (128000, 0.75)
    assert (window.preserve_recent_pairs, window.summary_max_tokens, window.summary_cache_minutes) == (2, 300, 30)
    memory = mate.memory
    assert (memory.min_messages_for_summarize, memory.min_user_message_length) == (4, 10)
    assert (memory.cooldown_minutes, memory.max_transcript_messages, memory.summary_max_tokens) == (5, 30, 1000)
    assert (memory.emergence_day_range, memory.emergence_cron) == (7, "0 2 * * *")
    assert (memory.profile_max_chars, memory.memory_max_chars) == (4000, 12000)
    assert mate.api.port == 8765 and mate.api.host == "127.0.0.1"
    assert [r.agent for r in mate.routing] == ["per-person", "per-chat"]


@pytest.mark.parametrize(
    ("mate", "expected"),
    [
        ({"memory": {"cooldown-minutes": -1}}, "mate.memory.cooldown-minutes: must be >= 0"),
        ({"llm": {"bogus": 1}}, "mate.llm.bogus: unknown key"),
        ({"agent": {"conversation": {"window": {"compact-trigger-ratio": 2}}}},
         "mate.agent.conversation.window.compact-trigger-ratio: must be <= 1"),
        ({"locale": "fr"}, "mate.locale:"),
        ({"llm": {"max-retries": "many"}}, "mate.llm.max-retries:"),
        ({"timezone": "Mars/Olympus"}, "mate.timezone: unknown time zone"),
        ({"memory": {"emergence-cron": "0 2 * *"}}, "mate.memory.emergence-cron: must be a five-field"),
        ({"channels": {"telegram": {"dm-policy": "maybe"}}}, "mate.channels.telegram.dm-policy:"),
        ({"agent": {"conversation": {"window": {"fold-after-quiet-minutes": -5}}}},
         "mate.agent.conversation.window.fold-after-quiet-minutes:"),
    ],
)
def test_config_error_is_one_line_naming_the_key(mate: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"mate": mate}, environ={})
    message = str(caught.value)
    assert message.startswith(expected)
    assert "\n" not in message


def test_unknown_top_level_key_is_named() -> None:
    with pytest.raises(ConfigError, match="^matey: unknown key"):
        parse_config({"matey": {}}, environ={})


def test_env_expansion_with_and_without_defaults() -> None:
    env = {"TOKEN": "abc", "EMPTY": ""}
    assert expand_env("${TOKEN}", env) == "abc"
    assert expand_env("x-${MISSING:-fallback}-y", env) == "x-fallback-y"
    assert expand_env("${EMPTY:-d}", env) == "d"
    assert expand_env("${EMPTY}", env) == ""
    assert expand_env({"a": ["${TOKEN}", 3]}, env) == {"a": ["abc", 3]}
    with pytest.raises(ConfigError, match="MISSING"):
        expand_env("${MISSING}", env)


def test_secrets_come_from_env_and_are_masked(tmp_path: Path) -> None:
    loaded = load_config(REPO / "config.yaml", environ={"ANTHROPIC_API_KEY": "sk-ant-secret",
                                                         "TELEGRAM_BOT_TOKEN": "123:ABC"})
    assert loaded.mate.llm.api_key == "sk-ant-secret"
    assert loaded.mate.llm.uses_anthropic
    dumped = str(masked_dump(loaded))
    assert "sk-ant-secret" not in dumped and "123:ABC" not in dumped
    assert masked_dump(loaded)["mate"]["llm"]["api-key"] == "***"


def test_provider_auto_is_offline_without_key() -> None:
    assert not Config().mate.llm.uses_anthropic
    assert parse_config({"mate": {"llm": {"provider": "anthropic", "api-key": "k"}}}, environ={}).mate.llm.uses_anthropic


def test_mate_config_env_selects_file(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("mate:\n  locale: zh-CN\n", encoding="utf-8")
    assert load_config(environ={"MATE_CONFIG": str(file)}).mate.locale == "zh-CN"


def test_invalid_yaml_and_missing_file_are_one_line(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("mate: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(file, environ={})
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.yaml", environ={})


def test_empty_agent_list_creates_agent_one() -> None:
    assert [a.id for a in parse_config({"mate": {"agents": []}}, environ={}).mate.agents] == [1]


def test_every_key_in_config_yaml_is_explained() -> None:
    import re
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[2] / "config.yaml").read_text(encoding="utf-8").splitlines()
    bare = [line for line in lines if re.match(r"^\s+[a-z-]+: [^#]*$", line)]
    assert bare == []
    assert not any(word in line.lower() for line in lines for word in ("spec", "issue"))


@pytest.mark.parametrize(("llm", "setting", "minutes"), [
    ({}, "auto", 50.0),  # Anthropic's own API
    ({"base-url": "https://gateway.example.com"}, "auto", 50.0),  # a gateway in front of it
    ({"base-url": "https://api.openai.com/v1", "api": "openai"}, "auto", 0.0),  # the provider's own cache lifetime
    ({"base-url": "http://127.0.0.1:8080"}, "auto", 0.0),  # llama.cpp on this machine
    ({"base-url": "http://192.168.1.20:8080"}, "auto", 0.0),
    ({"base-url": "http://llama:8080"}, "auto", 0.0),  # a container beside this one
    ({"base-url": "http://gpu-box.local:8080"}, "auto", 0.0),
    ({"base-url": "http://127.0.0.1:8080"}, 30, 30.0),  # a number is taken as given
    ({}, 0, 0.0),
])
def test_quiet_folds_run_on_hosted_messages_apis_unless_a_number_is_given(
    llm: dict[str, str], setting: object, minutes: float,
) -> None:
    mate = parse_config({"mate": {"llm": {"api-key": "k", **llm},
                                  "agent": {"conversation": {"window": {"fold-after-quiet-minutes": setting}}}}},
                        environ={}).mate
    assert mate.agent.conversation.window.quiet_fold_minutes(mate.llm.hosted_messages_api) == minutes
