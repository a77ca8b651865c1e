"""Reading config.yaml: ${ENV} references, the protocol `auto` resolves to, one-line errors, the masked dump."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from bot.core.errors import ConfigError
from bot.core.config.base import SECRET_KEYS
from bot.core.config.mate import Config


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: Any, environ: Mapping[str, str] | None = None) -> Any:
    """Replace ${NAME} and ${NAME:-default} in every string of a YAML tree."""
    env = os.environ if environ is None else environ
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            found = env.get(name)
            if found:
                return found
            if default is not None:
                return default
            if name in env:
                return ""
            raise ConfigError(f"environment variable {name} is not set (use ${{{name}:-}} for an empty default)")

        return _ENV_REF.sub(substitute, value)
    if isinstance(value, dict):
        return {k: expand_env(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env) for v in value]
    return value


# Where a key takes one of several shapes, pydantic names the shape tried in the error's
# location ("EmbeddingsConfig", "literal['builtin']"): not a key the person wrote.
_SHAPE_TRIED = re.compile(r"^[A-Z][A-Za-z]*Config$|^literal\[|^function-")


def _error_line(error: ValidationError) -> str:
    first = error.errors()[0]
    path = ".".join(str(part) for part in first["loc"] if not _SHAPE_TRIED.match(str(part)))
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif message.startswith("Input should be greater than or equal to"):
        message = "must be >= " + message.rsplit(" ", 1)[-1]
    elif message.startswith("Input should be less than or equal to"):
        message = "must be <= " + message.rsplit(" ", 1)[-1]
    elif message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if re.match(r"^[a-z][a-z0-9.-]*: ", message):  # a cross-field check names its own key
        return f"{path}.{message}" if path else message
    return f"{path}: {message}" if path else message


def resolve_api(data: Any, environ: Mapping[str, str]) -> Any:
    """`mate.llm.api: auto` made concrete from the environment: openai when OPENAI_API_KEY is set
    and ANTHROPIC_API_KEY is not, else anthropic; with neither set it stays `auto` (spoken as
    anthropic), so a missing key can name both variables. With openai, an empty api-key / base-url is
    taken from OPENAI_API_KEY / OPENAI_BASE_URL, as the openai SDK itself would."""
    mate = data.get("mate") if isinstance(data, dict) else None
    llm = mate.get("llm") if isinstance(mate, dict) else None
    if not isinstance(mate, dict) or not isinstance(llm, dict):
        return data
    api = llm.get("api", "anthropic")
    if api == "auto":
        openai_key, anthropic_key = bool(environ.get("OPENAI_API_KEY")), bool(environ.get("ANTHROPIC_API_KEY"))
        if not openai_key and not anthropic_key:
            return data
        api = "openai" if openai_key and not anthropic_key else "anthropic"
    if api != "openai":
        return {**data, "mate": {**mate, "llm": {**llm, "api": api}}} if "api" in llm else data
    resolved = {**llm, "api": "openai"}
    for key, variable in (("api-key", "OPENAI_API_KEY"), ("base-url", "OPENAI_BASE_URL")):
        field = key.replace("-", "_")
        if not str(llm.get(key) or llm.get(field) or "").strip() and environ.get(variable):
            resolved.pop(field, None)
            resolved[key] = environ[variable]
    return {**data, "mate": {**mate, "llm": resolved}}


def parse_config(data: Any, source: str = "<memory>", environ: Mapping[str, str] | None = None) -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping with the key 'mate'")
    try:
        expanded = resolve_api(expand_env(data, environ), os.environ if environ is None else environ)
        return Config.model_validate({**expanded, "source": source})
    except ValidationError as exc:
        raise ConfigError(_error_line(exc)) from None


def load_config(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read PATH (or $MATE_CONFIG, or ./config.yaml when present) into a Config."""
    env = os.environ if environ is None else environ
    chosen = path or env.get("MATE_CONFIG")
    if chosen is None:
        default = Path("config.yaml")
        if not default.exists():
            return parse_config({}, "<defaults>", env)
        chosen = default
    file = Path(chosen)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{file}:{where} invalid YAML") from None
    return parse_config(data, str(file), env)


def masked_dump(config: Config) -> dict[str, Any]:
    """The effective configuration with every secret replaced by '***'."""

    def mask(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: ("***" if k in SECRET_KEYS and v else mask(v)) for k, v in node.items()
            }
        if isinstance(node, list):
            return [mask(v) for v in node]
        return node

    masked: dict[str, Any] = mask(config.model_dump(mode="json", by_alias=True))
    return masked
