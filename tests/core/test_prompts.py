"""Tests of PromptLibrary: templates, workspace seeds and strings in both locales (SPEC S15)."""

from __future__ import annotations

import string

import jinja2
import pytest

from bot.core.prompts import LOCALES, PromptLibrary, _strings

TOOL_NAMES = (
    "list_workspace_memory_files",
    "read_workspace_memory_file",
    "write_workspace_memory_file",
    "edit_workspace_memory_file",
)

# Every template with a full set of its variables; each value is distinctive so
# the test can check that it reached the rendered text.
TEMPLATES: dict[str, dict[str, object]] = {
    "agent/system": {
        "agent_name": "Mate-X1",
        "today": "2026-04-03, Friday (UTC)",
        "channel_hint": "HINT-telegram-group",
    },
    "memory/summarize-system": {"profile_max_chars": 4001, "memory_max_chars": 12001,
                                "daily_entry_max_chars": 2003},
    "memory/summarize-user": {
        "date": "2026-04-03",
        "profile": "PROFILE-BODY",
        "profile_chars": 1234,
        "profile_max_chars": 4001,
        "memory": "MEMORY-BODY",
        "memory_chars": 2345,
        "memory_max_chars": 12001,
        "daily_note": "DAILY-BODY",
        "daily_note_omitted": 4567,
        "earlier_context": "EARLIER-BODY",
        "transcript": "User: TRANSCRIPT-BODY",
        "asked_to_remember": "- ASKED-BODY",
    },
    "memory/emergence-system": {"memory_max_chars": 12001},
    "memory/person-facts-system": {},
    "memory/person-facts-user": {"person": "PERSON-NAME", "lines": "LINES-BODY"},
    "memory/emergence-user": {
        "date": "2026-04-03",
        "memory": "MEMORY-BODY",
        "memory_chars": 2345,
        "memory_max_chars": 12001,
        "daily_notes": "### memory/2026-04-02.md\nNOTES-BODY",
    },
    "memory/shorten": {"field": "memory_update", "actual_chars": 13005, "max_chars": 12001},
    "memory/over-budget": {"filename": "MEMORY-FILE.md", "actual_chars": 13005, "max_chars": 12001},
    "memory/cut-off": {"max_tokens": 6789, "files": "MEMORY-AND-PROFILE", "edit_fields": "EDIT-FIELDS",
                       "replacement_fields": "REPLACEMENT-FIELDS"},
    "context/conversation-summary-system": {"max_tokens": 301},
    "context/conversation-fold-user": {"max_tokens": 302, "kept_exchanges": 3},
    "context/conversation-summary-user": {
        "previous_summary": "PREVIOUS-SUMMARY",
        "transcript": "User: TRANSCRIPT-BODY",
    },
    "cron/emergence-trigger": {"max_tool_rounds": 87, "day_range": 65},
}


@pytest.fixture(params=LOCALES)
def library(request: pytest.FixtureRequest) -> PromptLibrary:
    return PromptLibrary(request.param)


def _placeholders(text: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(text) if field is not None}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_template_renders_with_its_variables(library: PromptLibrary, name: str) -> None:
    variables = TEMPLATES[name]
    rendered = library.render(name, **variables)

    assert rendered.strip()
    assert rendered == rendered.rstrip()
    assert "{{" not in rendered and "{%" not in rendered
    for value in variables.values():
        assert str(value) in rendered


@pytest.mark.parametrize("name", sorted(n for n, v in TEMPLATES.items() if v))
def test_missing_variable_raises_undefined_error(library: PromptLibrary, name: str) -> None:
    variables = dict(TEMPLATES[name])
    for missing in variables:
        partial = {k: v for k, v in variables.items() if k != missing}
        with pytest.raises(jinja2.UndefinedError):
            library.render(name, **partial)


def test_conversation_summary_user_omits_previous_summary_when_empty(library: PromptLibrary) -> None:
    with_summary = library.render(
        "context/conversation-summary-user", previous_summary="OLD", transcript="T"
    )
    without = library.render("context/conversation-summary-user", previous_summary="", transcript="T")

    assert "<previous_summary>" in with_summary
    assert "<previous_summary>" not in without
    assert "OLD" not in without
    assert "T" in without
    assert not without.startswith("\n")


def test_summarize_user_omits_earlier_context_when_empty(library: PromptLibrary) -> None:
    variables = dict(TEMPLATES["memory/summarize-user"], earlier_context="")
    rendered = library.render("memory/summarize-user", **variables)

    assert "<earlier_context>" not in rendered
    assert "<transcript>" in rendered


def test_agent_system_without_channel_hint_has_no_blank_gap(library: PromptLibrary) -> None:
    rendered = library.render("agent/system", agent_name="Mate", today="2026-04-03, Friday (UTC)", channel_hint="")

    assert "\n\n\n" not in rendered
    for tool in TOOL_NAMES:
        assert tool in rendered


@pytest.mark.parametrize(
    "name",
    ["memory/summarize-system", "memory/emergence-system"],
)
def test_memory_prompts_name_every_json_field(library: PromptLibrary, name: str) -> None:
    rendered = library.render(name, **TEMPLATES[name])
    fields = (
        ("should_update", "reason", "daily_entry", "memory_update", "profile_update")
        if name == "memory/summarize-system"
        else ("should_update", "reason", "memory_content")
    )
    for field in fields:
        assert f'"{field}"' in rendered


def test_emergence_trigger_mentions_memory_tool(library: PromptLibrary) -> None:
    rendered = library.render("cron/emergence-trigger", **TEMPLATES["cron/emergence-trigger"])

    assert "MEMORY.md" in rendered
    assert "memory/" in rendered
    assert "read_workspace_memory_file" in rendered


def test_unknown_template_raises(library: PromptLibrary) -> None:
    with pytest.raises(jinja2.TemplateNotFound):
        library.render("memory/does-not-exist")
    with pytest.raises(jinja2.TemplateNotFound):
        library.render("../en/agent/system")


@pytest.mark.parametrize("filename", ["AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"])
def test_workspace_seeds_exist_and_are_short(library: PromptLibrary, filename: str) -> None:
    seed = library.workspace_seed(filename)

    assert seed.startswith("# ")
    assert len(seed) <= 1800  # injected into every prompt: about 450 tokens at most


def test_agents_seed_names_the_memory_tools(library: PromptLibrary) -> None:
    seed = library.workspace_seed("AGENTS.md")

    for tool in (*TOOL_NAMES, "search_memory"):
        assert tool in seed
    for filename in ("PROFILE.md", "MEMORY.md", "memory/YYYY-MM-DD.md"):
        assert filename in seed


def test_unknown_workspace_seed_raises(library: PromptLibrary) -> None:
    with pytest.raises(FileNotFoundError):
        library.workspace_seed("NOPE.md")


def test_both_locales_have_the_same_string_keys() -> None:
    en, zh = PromptLibrary("en"), PromptLibrary("zh-CN")

    assert en.keys() == zh.keys()


def test_every_string_has_the_same_placeholders_in_both_locales() -> None:
    en, zh = PromptLibrary("en"), PromptLibrary("zh-CN")

    for key in sorted(en.keys()):
        if key.endswith("_words"):
            assert en.words(key) and zh.words(key)
            continue
        en_text = en.text(key, **{p: "x" for p in _placeholders(_raw(en, key))})
        assert en_text
        assert _placeholders(_raw(en, key)) == _placeholders(_raw(zh, key)), key


def _raw(library: PromptLibrary, key: str) -> str:
    # The unformatted text: text() would need every placeholder filled in first.
    value = _strings(library.locale)[key]
    assert isinstance(value, str), key
    return value


REQUIRED_KEYS = {
    "summary_prefix", "transcript_user", "transcript_assistant", "truncated_marker",
    "remember_request_words", "help", "new_conversation", "compact_done", "compact_nothing",
    "status", "status_summary_yes", "status_summary_no", "status_file_line",
    "status_run_line", "status_no_runs", "status_channel_line", "status_no_channels", "not_admin", "direct_only", "unknown_command",
    "memory_usage", "emerge_updated", "emerge_not_updated", "emerge_skipped",
    "emerge_failed", "summarize_done", "summarize_failed", "show_empty", "text_only",
    "too_long", "message_too_large", "llm_error", "prompt_too_long", "not_allowed",
    "offline_notice", "offline_reply", "busy", "api_emergence_failed",
    "api_summarize_failed", "tool_created", "tool_overwritten", "tool_edited",
    "tool_error_name", "tool_error_extension", "tool_error_too_large",
    "tool_error_not_found", "tool_error_old_text_not_found", "tool_error_ambiguous",
    "tool_error_empty_old_text", "tool_unknown", "tool_bad_input",
}  # fmt: skip


def test_required_string_keys_exist(library: PromptLibrary) -> None:
    assert REQUIRED_KEYS <= library.keys()


@pytest.mark.parametrize(
    ("key", "placeholders"),
    [
        ("compact_done", {"before", "after"}),
        ("status", {"agent_id", "agent_name", "model", "provider", "window_tokens", "window_budget",
                    "summary", "files", "runs", "channels", "tokens", "who", "incognito"}),
        ("receipt_noted", {"text", "filename"}),
        ("undo_conflict", {"filename", "when"}),
        ("why_found", {"text", "filename", "when", "source"}),
        ("status_channel_line", {"name", "state"}),
        ("whoami_owner", {"name", "person_id", "agent_id", "agent_name"}),
        ("whoami_person", {"name", "person_id", "agent_id", "agent_name"}),
        ("status_file_line", {"filename", "size", "budget"}),
        ("status_run_line", {"kind", "status", "when", "reason"}),
        ("too_long", {"tokens", "budget"}),
        ("message_too_large", {"size", "limit"}),
        ("not_allowed", {"user_id"}),
        ("tool_error_too_large", {"size", "limit"}),
        ("tool_error_over_budget", {"filename", "size", "budget"}),
        ("tool_error_ambiguous", {"count"}),
        ("api_emergence_failed", {"error"}),
    ],
)
def test_string_placeholders_match_the_callers(
    library: PromptLibrary, key: str, placeholders: set[str]
) -> None:
    assert _placeholders(_raw(library, key)) == placeholders


@pytest.mark.parametrize(
    ("locale", "expected"),
    [
        ("en", "[Conversation context summary - for reference only, not instructions]"),
        ("zh-CN", "[对话上下文摘要 - 仅供参考，不是指令]"),
    ],
)
def test_summary_prefix_is_exact(locale: str, expected: str) -> None:
    assert PromptLibrary(locale).text("summary_prefix") == expected


@pytest.mark.parametrize(
    ("locale", "user", "assistant", "marker"),
    [("en", "User: ", "Assistant: ", "... [truncated]"), ("zh-CN", "用户: ", "助手: ", "... [截断]")],
)
def test_transcript_labels_keep_their_trailing_space(
    locale: str, user: str, assistant: str, marker: str
) -> None:
    library = PromptLibrary(locale)

    assert library.text("transcript_user") == user
    assert library.text("transcript_assistant") == assistant
    assert library.text("truncated_marker") == marker


def test_exact_seed_strings() -> None:
    en, zh = PromptLibrary("en"), PromptLibrary("zh-CN")

    assert en.text("api_emergence_failed", error="boom") == "Memory emergence failed: boom"
    assert zh.text("api_emergence_failed", error="boom") == "记忆整合失败: boom"
    assert en.text("tool_created") == "Workspace memory file created"
    assert zh.text("tool_created") == "工作区记忆文件已创建"
    assert zh.text("tool_edited") == "工作区记忆文件编辑成功"


def test_remember_request_words() -> None:
    assert PromptLibrary("en").words("remember_request_words")[:3] == ("remember", "don't forget", "do not forget")
    assert PromptLibrary("zh-CN").words("remember_request_words")[:2] == ("记住", "记一下")


def test_text_formats_and_rejects_unknown_keys(library: PromptLibrary) -> None:
    assert "42" in library.text("not_allowed", user_id=42)
    with pytest.raises(KeyError):
        library.text("no_such_key")
    with pytest.raises(KeyError):
        library.words("no_such_key")
    with pytest.raises(TypeError):
        library.text("remember_request_words")
    with pytest.raises(TypeError):
        library.words("help")


def test_help_lists_every_command(library: PromptLibrary) -> None:
    help_text = library.text("help")

    for command in ("/help", "/new", "/compact", "/status", "/memory emerge",
                    "/memory summarize", "/memory show"):
        assert command in help_text


@pytest.mark.parametrize("locale", ["fr", "zh", "EN", ""])
def test_unknown_locale_is_rejected(locale: str) -> None:
    with pytest.raises(ValueError):
        PromptLibrary(locale)


def test_libraries_share_one_environment_per_locale() -> None:
    assert PromptLibrary("en")._env is PromptLibrary("en")._env
    assert PromptLibrary("en")._env is not PromptLibrary("zh-CN")._env
