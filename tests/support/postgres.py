"""A throwaway PostgreSQL cluster for the storage contract suite: Debian's server binaries,
a data folder in a temp dir, listening on 127.0.0.1 only, stopped at the end of the run.

Where no server can be started (no binaries, no `postgres` user to run it as root) the
PostgreSQL side of the suite is skipped with the reason; the SQLite side still runs.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.daemon_process import free_port


class NoPostgres(Exception):
    """Why no cluster could be started here."""


@dataclass(frozen=True)
class Cluster:
    host: str
    port: int
    user: str

    def url(self, database: str) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"


def _binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return Path(pg_ctl).parent
    raise NoPostgres("PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql)")


@contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    """initdb, start, yield, stop and remove: about two seconds on two cores."""
    binaries = _binaries()
    prefix: list[str] = []
    owner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:  # the server refuses to run as root: run it as Debian's `postgres`
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError as exc:
            raise NoPostgres("running as root and there is no `postgres` user to run the server as") from exc
        prefix = ["runuser", "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="matebot-pg-"))
    data = base / "data"
    try:
        if owner is not None:
            os.chown(base, owner.pw_uid, owner.pw_gid)
        user = owner.pw_name if owner is not None else pwd.getpwuid(os.geteuid()).pw_name
        subprocess.run([*prefix, str(binaries / "initdb"), "-D", str(data), "-U", user, "--auth=trust",
                        "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        port = free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {base} -c fsync=off -c full_page_writes=off"
        subprocess.run([*prefix, str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-t", "60",
                        "-l", str(base / "server.log"), "start"], check=True, capture_output=True, timeout=90)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        shutil.rmtree(base, ignore_errors=True)
        raise NoPostgres(f"the server did not start: {exc} {detail.decode(errors='replace')[-300:]}") from exc
    try:
        yield Cluster("127.0.0.1", port, user)
    finally:
        subprocess.run([*prefix, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)
