"""Load the per-locale jinja2 prompt templates, workspace seeds and user-facing strings (SPEC S15)."""

from __future__ import annotations

import functools
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Callable

import jinja2
import yaml
from jinja2.loaders import split_template_path

LOCALES: tuple[str, ...] = ("en", "zh-CN")
TEMPLATE_SUFFIX = ".md.j2"
WORKSPACE_DIR = "workspace"
STRINGS_FILE = "strings.yaml"

_PACKAGE = "prompts"


def _locale_root(locale: str) -> Traversable:
    return resources.files(_PACKAGE).joinpath(locale)


def _resolve(root: Traversable, pieces: list[str]) -> Traversable:
    # One segment per joinpath call: not every Traversable accepts several at once.
    node = root
    for piece in pieces:
        node = node.joinpath(piece)
    return node


class _ResourceLoader(jinja2.BaseLoader):
    """Read templates through importlib.resources so zipped or editable installs work alike."""

    def __init__(self, root: Traversable) -> None:
        self._root = root

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str | None, Callable[[], bool] | None]:
        # split_template_path rejects ".." so a name can never leave the locale folder.
        node = _resolve(self._root, split_template_path(template))
        if not node.is_file():
            raise jinja2.TemplateNotFound(template)
        # Package data does not change while the daemon runs: always up to date.
        return node.read_text(encoding="utf-8"), None, lambda: True


@functools.lru_cache(maxsize=None)
def _environment(locale: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=_ResourceLoader(_locale_root(locale)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        # Prompts are plain text for an LLM, never HTML.
        autoescape=False,
    )


@functools.lru_cache(maxsize=None)
def _strings(locale: str) -> dict[str, str | tuple[str, ...]]:
    raw = _locale_root(locale).joinpath(STRINGS_FILE).read_text(encoding="utf-8")
    data = yaml.safe_load(raw) or {}
    if not isinstance(data, dict):
        raise ValueError(f"prompts/{locale}/{STRINGS_FILE} must be a mapping")
    strings: dict[str, str | tuple[str, ...]] = {}
    for key, value in data.items():
        if isinstance(value, list):
            strings[str(key)] = tuple(str(item) for item in value)
        elif isinstance(value, str):
            strings[str(key)] = value
        else:
            raise ValueError(f"prompts/{locale}/{STRINGS_FILE}: {key} must be a string or a list")
    return strings


class PromptLibrary:
    """Templates, workspace seeds and user-facing strings of one locale."""

    def __init__(self, locale: str) -> None:
        if locale not in LOCALES:
            raise ValueError(f"unknown locale {locale!r}; expected one of {', '.join(LOCALES)}")
        self.locale: str = locale
        self._env = _environment(locale)

    def render(self, name: str, **variables: object) -> str:
        """Render prompts/<locale>/<name>.md.j2; a missing variable raises jinja2.UndefinedError."""
        template = self._env.get_template(name + TEMPLATE_SUFFIX)
        return template.render(**variables).rstrip()

    def workspace_seed(self, filename: str) -> str:
        """Return the raw seed text of a core workspace file (AGENTS.md, SOUL.md, ...)."""
        node = _resolve(_locale_root(self.locale).joinpath(WORKSPACE_DIR), split_template_path(filename))
        if not node.is_file():
            raise FileNotFoundError(f"prompts/{self.locale}/{WORKSPACE_DIR}/{filename}")
        return node.read_text(encoding="utf-8")

    def text(self, key: str, **variables: object) -> str:
        """Return the user-facing string `key`, formatted with str.format(**variables)."""
        value = _strings(self.locale)[key]
        if not isinstance(value, str):
            raise TypeError(f"strings.yaml: {key} is a list; use words()")
        return value.format(**variables)

    def words(self, key: str) -> tuple[str, ...]:
        """Return a list-valued entry of strings.yaml, such as remember_request_words."""
        value = _strings(self.locale)[key]
        if isinstance(value, str):
            raise TypeError(f"strings.yaml: {key} is a string; use text()")
        return value

    def keys(self) -> frozenset[str]:
        """Every key of this locale's strings.yaml (for consistency checks)."""
        return frozenset(_strings(self.locale))
