"""A real PostgreSQL server for a test: initdb into a temporary folder, loopback only, stopped by PID.

PostgreSQL refuses to run as root, so as root it runs as ``nobody``. Tests that need it skip (or, under CI, fail)
when no PostgreSQL binaries exist (Debian: ``apt-get install -y postgresql``; in /usr/lib/postgresql/<version>/bin).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

from conftest import unavailable
from helpers.search import wait_for


def postgres_bin() -> Path | None:
    found = shutil.which("postgres")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(versions[-1]).parent if versions else None


def as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "nobody", "--", *command] if os.geteuid() == 0 else command


@contextmanager
def postgres_server(user: str = "cutlab", password: str | None = None):
    """Yields the server's URL, ``postgresql://USER[:PASSWORD]@127.0.0.1:PORT/postgres``; with a password, the
    server checks it (scram-sha-256), else it trusts every local connection."""
    binaries = postgres_bin()
    if binaries is None or not (binaries / "initdb").exists():
        unavailable("no PostgreSQL server binaries (postgres, initdb); install them: apt-get install -y postgresql")
    base = Path(tempfile.mkdtemp(prefix="cutlab-pg-"))  # under /tmp: reachable by the server's user
    if os.geteuid() == 0:
        shutil.chown(base, "nobody")
    auth = ["--auth=trust"]
    if password is not None:
        (base / "pw").write_text(password + "\n")
        if os.geteuid() == 0:
            shutil.chown(base / "pw", "nobody")
        auth = ["--auth=scram-sha-256", f"--pwfile={base / 'pw'}"]
    subprocess.run(as_server_user([str(binaries / "initdb"), "-D", str(base / "data"), "-U", user, *auth,
                                   "-E", "UTF8"]), check=True, capture_output=True, timeout=120)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (base / "server.log").open("w")
    subprocess.Popen(as_server_user([str(binaries / "postgres"), "-D", str(base / "data"), "-p", str(port),
                                     "-c", "listen_addresses=127.0.0.1", "-k", str(base)]), stdout=log, stderr=log)
    pid_file = base / "data" / "postmaster.pid"
    try:
        wait_for(lambda: pid_file.exists() and len(pid_file.read_text().splitlines()) >= 8
                 and "ready" in pid_file.read_text(), 60, "PostgreSQL to accept connections", poll=0.1)
        secret = f":{password}" if password is not None else ""
        yield f"postgresql://{user}{secret}@127.0.0.1:{port}/postgres"
    finally:
        if pid_file.exists():
            server = int(pid_file.read_text().split()[0])
            os.kill(server, signal.SIGINT)  # fast shutdown
            wait_for(lambda: not Path(f"/proc/{server}").exists(), 30, "PostgreSQL to stop", poll=0.1)
        log.close()
        shutil.rmtree(base, ignore_errors=True)
