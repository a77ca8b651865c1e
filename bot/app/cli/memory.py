"""`matebot memory ...`: the memory files shown, searched, exported, imported, injected, and memory work run now."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from bot.app.cli.exits import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from bot.core.config import Config
from bot.core.errors import MateError


async def memory_show(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core

    async with open_core(config) as core:
        await core.agents.get(args.agent)
        if args.filename:
            found = await core.memory_files.read(args.agent, args.filename)
            if found is None:
                print(f"matebot: agent {args.agent} has no file {args.filename}", file=sys.stderr)
                return EXIT_RUNTIME
            print(found.content)
            return EXIT_OK
        for record in await core.memory_files.files(args.agent):
            flag = "enabled " if record.enabled else "disabled"
            print(f"{record.filename}\t{flag}\t{record.file_size} B\tv{record.version}\t{record.update_time}")
    return EXIT_OK


async def memory_search(config: Config, args: argparse.Namespace) -> int:
    import json

    from bot.app.core import open_core
    from bot.features.search import SearchFeature
    from memory.recall.search import MAX_LIMIT, MemorySearchService

    if not 1 <= args.limit <= MAX_LIMIT:
        print(f"matebot: --limit must be from 1 to {MAX_LIMIT}", file=sys.stderr)
        return EXIT_USAGE
    async with open_core(config) as core:
        await core.agents.get(args.agent)
        # Words only: the daemon's embeddings client is not opened for one command.
        searches = SearchFeature(MemorySearchService(core.repos.search, timezone=core.config.mate.timezone), core.prompts)
        result = await searches.search(args.agent, " ".join(args.query), args.limit)
        print(json.dumps(result, ensure_ascii=False, indent=2) if args.json else searches.lines(result))
    return EXIT_OK


async def memory_export(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core
    from memory.workspace.transfer import export_workspace

    async with open_core(config) as core:
        await core.agents.get(args.agent)
        report = await export_workspace(core.workspace, args.agent, args.dir)
    print(f"exported {len(report.written)} files to {args.dir}")
    for name, why in report.refused:
        print(f"matebot: not exported {name}: {why}", file=sys.stderr)
    return EXIT_OK if not report.refused else EXIT_RUNTIME


async def memory_import(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core
    from memory.workspace.transfer import import_workspace

    async with open_core(config) as core:
        await core.agents.get(args.agent)
        report = await import_workspace(core.workspace, args.agent, args.dir)
    flags = f", {len(report.flags_changed)} with new flags" if report.flags_changed else ""
    print(f"imported {len(report.written)} files, {len(report.unchanged)} unchanged{flags}")
    for name, why in report.refused:
        print(f"matebot: refused {name}: {why}", file=sys.stderr)
    return EXIT_OK if not report.refused else EXIT_RUNTIME


async def memory_toggle(config: Config, args: argparse.Namespace) -> int:
    from bot.app.core import open_core

    enabled = args.action == "enable"
    async with open_core(config) as core:
        await core.agents.get(args.agent)
        if await core.workspace.get(args.agent, args.filename) is None:
            print(f"matebot: agent {args.agent} has no file {args.filename}", file=sys.stderr)
            return EXIT_RUNTIME
        await core.workspace.set_enabled(args.agent, args.filename, enabled)
    print(f"{args.filename} {'enabled' if enabled else 'disabled'} for agent {args.agent}")
    return EXIT_OK


async def memory_emerge(config: Config, args: argparse.Namespace) -> int:
    from bot.conversation.commands.handler import emergence_text
    from bot.app.runtime import open_runtime

    answer = await ask_daemon(config, f"/api/v1/memory/{args.agent}/emergence")
    if answer is not None:
        from bot.core.prompts import PromptLibrary

        print(emergence_text(PromptLibrary(config.mate.locale), Outcome.of(answer)))
        return EXIT_OK
    async with open_runtime(config) as rt:
        await rt.core.agents.get(args.agent)
        assert rt.memory_services is not None  # open_runtime builds them unless told not to
        outcome = await rt.memory_services.emergence.emerge(args.agent)
        print(emergence_text(rt.core.prompts, outcome))
    return EXIT_RUNTIME if outcome.status == "failed" else EXIT_OK


async def memory_summarize(config: Config, args: argparse.Namespace) -> int:
    from urllib.parse import quote

    from bot.app.runtime import open_runtime

    answer = await ask_daemon(config, f"/api/v1/memory/{args.agent}/summarize/{quote(args.conversation, safe='')}")
    if answer is not None:
        from bot.core.prompts import PromptLibrary

        outcome = Outcome.of(answer)
        print(PromptLibrary(config.mate.locale).text("summarize_done", status=outcome.status, reason=outcome.reason))
        return EXIT_OK
    async with open_runtime(config) as rt:
        await rt.core.agents.get(args.agent)
        conversation = await rt.core.repos.conversations.get(args.conversation)
        if conversation is None or conversation.agent_id != args.agent:
            print(f"matebot: agent {args.agent} has no conversation {args.conversation}", file=sys.stderr)
            return EXIT_RUNTIME
        assert rt.memory_services is not None
        analysed = await rt.memory_services.worker.summarize_now(args.agent, args.conversation)
        prompts = rt.core.prompts
        if analysed.status == "failed":
            print(prompts.text("summarize_failed", error=analysed.reason), file=sys.stderr)
            return EXIT_RUNTIME
        print(prompts.text("summarize_done", status=analysed.status, reason=analysed.reason))
    return EXIT_OK


@dataclass(frozen=True, slots=True)
class Outcome:
    """A memory run's outcome as the daemon's API reports it."""

    status: str
    updated: bool
    reason: str

    @classmethod
    def of(cls, data: dict[str, Any]) -> Outcome:
        return cls(str(data.get("status", "")), bool(data.get("updated")), str(data.get("reason") or ""))


async def ask_daemon(config: Config, path: str) -> dict[str, Any] | None:
    """Memory work for a database a running daemon holds is done by that daemon, through its API.

    Two processes must not run memory work on one database at once, and this command may
    not have the daemon's model (its API key lives in the daemon's environment): run here,
    it would report success having asked no model. None: no daemon runs, do it here."""
    from bot.app.cli.chat_client import api_token, daemon_running

    if not daemon_running(config):
        return None
    database = config.mate.database.path
    api = config.mate.api
    if not api.enabled:
        if config.mate.llm.uses_anthropic:
            return None  # this command has a model of its own: as before, it runs here
        raise MateError(f"a matebot daemon is running on {database} with its API off (mate.api.enabled), "
                        f"and this command has no model (no API key here); run it with the daemon's "
                        f"ANTHROPIC_API_KEY, turn the API on, or use /memory in a chat")
    import aiohttp

    host = "127.0.0.1" if api.host in ("0.0.0.0", "::", "") else api.host
    netloc = f"[{host}]" if ":" in host else host
    print(f"matebot: a daemon is running on {database}: asking it ({netloc}:{api.port})", file=sys.stderr)
    # No total limit: a consolidation by a slow model takes minutes; the daemon bounds it.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    headers = {"Authorization": f"Bearer {api_token(config)}"}
    try:
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as http:
            async with http.post(f"http://{netloc}:{api.port}{path}") as response:
                body = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise MateError(f"a matebot daemon is running on {database} but its API at {netloc}:{api.port} "
                        f"did not answer ({type(exc).__name__})") from None
    if response.status != 200 or not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        detail = body.get("msg") if isinstance(body, dict) else None
        raise MateError(f"the running matebot refused: HTTP {response.status} {detail or response.reason}")
    data: dict[str, Any] = body["data"]
    return data
