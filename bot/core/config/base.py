"""What every section of the configuration is built on: kebab-case keys, frozen models, checked addresses."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    field_validator,
)



SECRET_KEYS = frozenset({"api-key", "token", "secret-token"})


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class Section(BaseModel):
    """A section of config.yaml: kebab-case keys, unknown keys refused, frozen once read."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=_kebab, populate_by_name=True
    )


def whole_number(value: object) -> int | None:
    """An int as the file may give it (`2`, or `"2"` after ${ENV} substitution); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def http_address(value: str) -> str:
    """An endpoint's base URL, checked: http(s), a host, a valid port."""

    value = value.strip()
    try:
        parts = urlsplit(value)
        _ = parts.port  # a port out of range or not a number raises ValueError
    except ValueError:
        raise ValueError("must be an http:// or https:// address") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// address, e.g. http://127.0.0.1:8080/v1")
    return value


class EndpointSection(Section):
    """An OpenAI-compatible endpoint: its address (as the openai SDK takes it) and key."""

    base_url: str
    api_key: str = ""  # empty: a local server that wants none

    @field_validator("base_url")
    @classmethod
    def _http_address(cls, value: str) -> str:
        return http_address(value)


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
