"""`matebot check-config`: the effective configuration, secrets masked, and what it resolves to."""

from __future__ import annotations

import argparse
import os

import yaml

from bot.app.cli.exits import EXIT_OK
from bot.core.config import Config, masked_dump
from bot.core.errors import ConfigError
from bot.core.redaction import Redactor, config_secrets


async def check_config(config: Config, args: argparse.Namespace) -> int:
    from bot.conversation.agents import configured_id_collision
    from bot.storage.agents import read_chat_bindings

    bindings = read_chat_bindings(config.mate.sqlite_file)  # read-only; {} before the first start
    problem = configured_id_collision(config.mate, bindings)
    if problem:
        raise ConfigError(problem)
    # The redactor also masks credentials inside URLs (a base-url with user:password@).
    redact = Redactor(config_secrets(config))
    print(redact(yaml.safe_dump(masked_dump(config), sort_keys=False, allow_unicode=True)), end="")
    llm = config.mate.llm
    protocol = "anthropic" if llm.protocol == "anthropic" else "openai-compatible chat completions"
    resolved = f"{protocol}, model {llm.model}" if llm.uses_anthropic else "offline (canned replies, no model)"
    from bot.app.daemon import other_protocol_key

    mismatch = other_protocol_key(llm, os.environ)
    why = " (no API key)" if llm.provider == "auto" and not llm.uses_anthropic and mismatch is None else ""
    print(f"# provider {llm.provider} resolves to: {resolved}{why}")
    if mismatch is not None:
        found, wanted = mismatch
        print(f"# {found} is set, but mate.llm.api is {llm.api}: set mate.llm.api: {wanted} (or auto) to use it")
    missing = config.mate.channels.missing_token()
    if missing:  # not an error here: only `matebot run` starts the channels
        print(f"# warning: {missing}; `matebot run` stops at this until it is set")
    from bot.conversation.people import shared_owner_memory

    warning = shared_owner_memory(config.mate)
    if warning:
        print(f"# warning: {warning}")
    return EXIT_OK
