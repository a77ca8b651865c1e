"""Export an agent's workspace to a folder and import it back (SPEC S7)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bot.errors import WorkspaceError
from memory.filenames import validate_workspace_filename
from memory.workspace import WorkspaceFileService

MANIFEST = ".matebot-workspace.json"


@dataclass(frozen=True, slots=True)
class TransferReport:
    written: tuple[str, ...]
    unchanged: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()


async def export_workspace(workspace: WorkspaceFileService, agent_id: int, folder: Path) -> TransferReport:
    """Write every live file as a real file; flags go to a small manifest beside them."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, dict[str, object]] = {}
    written: list[str] = []
    for record in await workspace.list(agent_id):
        target = folder.joinpath(*record.filename.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(record.content, encoding="utf-8", newline="")
        manifest[record.filename] = {"enabled": record.enabled, "sort_order": record.sort_order}
        written.append(record.filename)
    (folder / MANIFEST).write_text(
        json.dumps({"agent_id": agent_id, "files": manifest}, ensure_ascii=False, indent=2) + "\n",
        encoding="utf-8",
    )
    return TransferReport(tuple(written))


async def import_workspace(workspace: WorkspaceFileService, agent_id: int, folder: Path) -> TransferReport:
    """Read every .md file under `folder` back; files absent from the folder are left alone."""
    if not folder.is_dir():
        raise WorkspaceError(f"{folder} is not a folder")
    flags: dict[str, dict[str, object]] = {}
    manifest_path = folder / MANIFEST
    if manifest_path.exists():
        flags = json.loads(manifest_path.read_text(encoding="utf-8")).get("files", {})
    written: list[str] = []
    unchanged: list[str] = []
    refused: list[str] = []
    for path in sorted(folder.rglob("*.md")):
        relative = path.relative_to(folder).as_posix()
        try:
            name = validate_workspace_filename(relative)
        except WorkspaceError:
            refused.append(relative)
            continue
        content = path.read_text(encoding="utf-8")
        existing = await workspace.get(agent_id, name)
        if existing is not None and existing.content == content:
            unchanged.append(name)
            continue
        wanted = flags.get(name, {})
        outcome = await workspace.write(
            agent_id, name, content,
            expected_version=existing.version if existing else 0,
            enabled=bool(wanted.get("enabled", False)),
            sort_order=int(wanted.get("sort_order", 100)),  # type: ignore[call-overload]
        )
        if not outcome.created and "enabled" in wanted and outcome.file.enabled != wanted["enabled"]:
            await workspace.set_enabled(agent_id, name, bool(wanted["enabled"]))
        written.append(name)
    return TransferReport(tuple(written), tuple(unchanged), tuple(refused))
