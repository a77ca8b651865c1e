"""Export an agent's workspace to a folder and import it back (SPEC S7, S23)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.core.errors import WorkspaceError
from memory.workspace.filenames import validate_workspace_filename
from memory.workspace.service import WorkspaceFileService

MANIFEST = ".matebot-workspace.json"
_NAME_MAX_BYTES = 255  # what ext4, APFS and NTFS allow for one path component


@dataclass(frozen=True, slots=True)
class FileFlags:
    enabled: bool | None = None
    sort_order: int | None = None


@dataclass(frozen=True, slots=True)
class TransferReport:
    written: tuple[str, ...]
    unchanged: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()  # (name, why)
    flags_changed: tuple[str, ...] = ()  # content unchanged, enabled / sort_order applied


async def export_workspace(workspace: WorkspaceFileService, agent_id: int, folder: Path) -> TransferReport:
    """Write every live file as a real file; flags go to a small manifest beside them.

    A file whose name this file system cannot hold is refused (named in the report); the
    others are still written.
    """
    if folder.exists() and not folder.is_dir():
        raise WorkspaceError(f"{folder} exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkspaceError(f"cannot create {folder}: {exc.strerror or exc}") from None
    manifest: dict[str, dict[str, object]] = {}
    written: list[str] = []
    refused: list[tuple[str, str]] = []
    for record in await workspace.list(agent_id):
        parts = record.filename.split("/")
        if any(len(part.encode("utf-8")) > _NAME_MAX_BYTES for part in parts):
            refused.append((record.filename, f"the name is longer than {_NAME_MAX_BYTES} bytes, "
                                             "which a file system cannot hold"))
            continue
        target = folder.joinpath(*parts)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(record.content, encoding="utf-8", newline="")
        except OSError as exc:
            refused.append((record.filename, f"cannot write {target}: {exc.strerror or exc}"))
            continue
        manifest[record.filename] = {"enabled": record.enabled, "sort_order": record.sort_order}
        written.append(record.filename)
    try:
        (folder / MANIFEST).write_text(
            json.dumps({"agent_id": agent_id, "files": manifest}, ensure_ascii=False, indent=2) + "\n",
            encoding="utf-8",
        )
    except OSError as exc:
        raise WorkspaceError(f"cannot write {folder / MANIFEST}: {exc.strerror or exc}") from None
    return TransferReport(tuple(written), refused=tuple(refused))


def read_manifest(folder: Path) -> dict[str, FileFlags]:
    """The flags in the folder's manifest ({} without one); a malformed one is a WorkspaceError."""
    path = folder / MANIFEST
    if not path.exists():
        return {}
    where = f"{path}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise WorkspaceError(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise WorkspaceError(f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    files = data.get("files", {}) if isinstance(data, dict) else None
    if not isinstance(files, dict):
        raise WorkspaceError(f'{where}: expected an object with "files": {{name: {{"enabled", "sort_order"}}}}')
    return {name: _flags(where, name, entry) for name, entry in files.items()}


def _flags(where: str, name: str, entry: Any) -> FileFlags:
    if not isinstance(entry, dict):
        raise WorkspaceError(f"{where}: files.{name} must be an object")
    enabled, sort_order = entry.get("enabled"), entry.get("sort_order")
    if enabled is not None and not isinstance(enabled, bool):
        raise WorkspaceError(f"{where}: files.{name}.enabled must be true or false")
    if sort_order is not None and (isinstance(sort_order, bool) or not isinstance(sort_order, int)):
        raise WorkspaceError(f"{where}: files.{name}.sort_order must be a whole number")
    return FileFlags(enabled, sort_order)


def refuse_links(folder: Path) -> None:
    """A WorkspaceError naming the first symbolic link the import would read or enter.

    A link reaches outside the folder (`PROFILE.md -> /etc/passwd`, a linked folder of
    someone else's notes): an import reads only the files that are in the folder itself.
    The whole import is refused, so a link is never half-followed and nothing half-imported.
    """
    links: list[Path] = []
    for parent, folders, files in os.walk(folder, followlinks=False):  # never walks into a link
        for name in sorted(folders) + sorted(files):
            path = Path(parent, name)
            if path.is_symlink() and (name in folders or name.endswith(".md") or name == MANIFEST):
                links.append(path)
    if not links:
        return
    first = min(links)
    try:
        target = f" (to {os.readlink(first)})"
    except OSError:
        target = ""
    more = f", and {len(links) - 1} more" if len(links) > 1 else ""
    raise WorkspaceError(f"{first.relative_to(folder).as_posix()} is a symbolic link{target}{more}: an import "
                         "reads only real files inside the folder, so nothing was imported")


def _read_folder(folder: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(name, content) of every importable .md file, and (name, why) of those refused."""
    found: list[tuple[str, str]] = []
    refused: list[tuple[str, str]] = []
    for path in sorted(folder.rglob("*.md")):
        relative = path.relative_to(folder).as_posix()
        if not path.is_file():
            continue
        try:
            name = validate_workspace_filename(relative)
        except WorkspaceError as exc:
            refused.append((relative, str(exc)))
            continue
        try:
            found.append((name, path.read_bytes().decode("utf-8")))
        except UnicodeDecodeError:
            refused.append((relative, "not UTF-8 text"))
        except OSError as exc:
            refused.append((relative, f"cannot read it: {exc.strerror or exc}"))
    return found, refused


async def import_workspace(workspace: WorkspaceFileService, agent_id: int, folder: Path) -> TransferReport:
    """Read every .md file under `folder` back; files absent from the folder are left alone.

    The manifest's `enabled` / `sort_order` are applied to changed and unchanged files alike.
    Everything is read and checked before the first write, so a malformed manifest or a
    symbolic link in the folder changes nothing.
    """
    if not folder.is_dir():
        raise WorkspaceError(f"{folder} is not a folder")
    refuse_links(folder)
    flags = read_manifest(folder)
    found, refused = _read_folder(folder)
    written: list[str] = []
    unchanged: list[str] = []
    flags_changed: list[str] = []
    for name, content in found:
        wanted = flags.get(name, FileFlags())
        existing = await workspace.get(agent_id, name)
        if existing is None or existing.content != content:
            outcome = await workspace.write(
                agent_id, name, content,
                expected_version=existing.version if existing else 0,
                enabled=wanted.enabled if wanted.enabled is not None else False,
                sort_order=wanted.sort_order if wanted.sort_order is not None else 100, change="import",
            )
            written.append(name)
            existing = outcome.file
            if outcome.created:
                continue
        changed = False
        if wanted.enabled is not None and existing.enabled != wanted.enabled:
            await workspace.set_enabled(agent_id, name, wanted.enabled)
            changed = True
        if wanted.sort_order is not None and existing.sort_order != wanted.sort_order:
            await workspace.set_sort_order(agent_id, name, wanted.sort_order)
            changed = True
        if name not in written:
            (flags_changed if changed else unchanged).append(name)
    return TransferReport(tuple(written), tuple(unchanged), tuple(refused), tuple(flags_changed))
