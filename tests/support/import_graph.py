"""The import graph of the product's modules, read from their source, and the cycles in it."""

from __future__ import annotations

import ast
from pathlib import Path



ROOT = Path(__file__).resolve().parents[2]
# The layout's layers, lowest first: imports only run downwards (tests/core/test_layers.py).
# What the adapters and the router both use, written once beside the channel port.
CHANNEL_GROUND = ("channels.base", "channels.formatting", "channels.streaming")
LAYERS: tuple[tuple[str, ...], ...] = (
    ("bot.core", *CHANNEL_GROUND),
    ("bot.storage",),
    ("bot.llm",),
    ("bot.media", "memory"),
    ("bot.conversation",),
    ("bot.schedule",),
    ("bot.features",),
    ("channels",),
    ("bot.app", "bot.__main__", "bot"),
)


def _imports(path: Path, package: str) -> set[str]:
    """Every module `path` imports, wherever the import sits (TYPE_CHECKING and functions included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
            # `from bot.llm import port` imports the submodule bot.llm.port
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph(folders: tuple[str, ...]) -> dict[str, set[str]]:
    modules = {_module_name(p): p for folder in folders for p in (ROOT / folder).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m for m in _imports(path, package) if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return found
