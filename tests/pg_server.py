"""A throw-away PostgreSQL server for the tests and benchmarks/db_scale.py.

    server = PgServer.start()            # initdb + pg_ctl start in a temporary folder
    url = server.create_database()       # postgresql://postgres@127.0.0.1:PORT/tir_<n>, empty
    ...
    server.stop()                        # pg_ctl stop, folder removed

It uses Debian's PostgreSQL binaries (`pg_config --bindir`, else /usr/lib/postgresql/<newest>/bin;
quickstart.sh installs the `postgresql` package). The server listens on 127.0.0.1 only, on a
free port, with trust authentication for loopback connections and no Unix socket. As root
(initdb refuses to run as root) the folder belongs to the `postgres` user and the server runs
as it (runuser). ``fast=True`` (the tests) turns fsync off; the benchmark keeps the defaults.
Missing binaries raise :class:`PgUnavailable`: a test that needs the server fails, it is never
skipped.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SERVER_USER = "postgres"  # the database superuser initdb creates (and, as root, the OS user)
INITDB = ("--no-locale", "-E", "UTF8", "--no-sync")  # byte-order text, as SQLite; no fsync of the new folder


class PgUnavailable(RuntimeError):
    """No PostgreSQL server binaries here, or the server did not start."""


def pg_bindir() -> Path:
    """The folder of initdb / pg_ctl: `pg_config --bindir`, else Debian's newest version."""
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))
    debian = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
    candidates += sorted(debian, key=lambda p: int(p.parent.name), reverse=True)
    for d in candidates:
        if (d / "initdb").exists() and (d / "pg_ctl").exists():
            return d
    raise PgUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install the `postgresql` package "
        "(./quickstart.sh does, as root)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user(argv: list[str]) -> list[str]:
    """``argv`` run as the postgres OS user when we are root (initdb and postgres refuse root)."""
    if os.geteuid() != 0:
        return argv
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", SERVER_USER, "--", *argv]
    return ["su", SERVER_USER, "-s", "/bin/sh", "-c", " ".join(map(_quote, argv))]


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


@dataclass
class PgServer:
    """A running server: its folder, port and the databases made on it."""

    root: Path
    port: int
    bindir: Path
    _names: itertools.count = field(default_factory=lambda: itertools.count(1))

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SERVER_USER}@127.0.0.1:{self.port}/{dbname}"

    @classmethod
    def start(cls, fast: bool = True, timeout_s: float = 60.0) -> PgServer:
        """initdb into a new temporary folder and start the server (waits until it answers)."""
        bindir = pg_bindir()
        root = Path(tempfile.mkdtemp(prefix="tir-pg-"))
        if os.geteuid() == 0:
            shutil.chown(root, SERVER_USER)
        server = cls(root=root, port=0, bindir=bindir)
        try:
            server._run(
                [str(bindir / "initdb"), "-D", str(server.data), "-U", SERVER_USER, "--auth=trust", *INITDB],
                timeout_s,
            )
            conf = [
                "listen_addresses = '127.0.0.1'",
                "unix_socket_directories = ''",
                "max_connections = 200",
                "log_min_messages = warning",
            ]
            if fast:
                conf += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
            with open(server.data / "postgresql.conf", "a", encoding="utf-8") as f:
                f.write("\n".join(conf) + "\n")
            for attempt in range(3):  # the free port may be taken before the server binds it
                server.port = free_port()
                try:
                    log, wait = str(root / "log"), str(int(timeout_s))
                    port = f"-p {server.port}"
                    server._pg_ctl(["-l", log, "-w", "-t", wait, "-o", port, "start"], timeout_s)
                    break
                except PgUnavailable:
                    if attempt == 2:
                        raise
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return server

    def _run(self, argv: list[str], timeout_s: float) -> None:
        argv = _as_server_user(argv)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=self.root)
        if p.returncode != 0:
            log = self.root / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise PgUnavailable(f"{Path(argv[0]).name} failed ({p.returncode}): {p.stderr.strip()} {tail}")

    def _pg_ctl(self, args: list[str], timeout_s: float) -> None:
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), *args], timeout_s + 10)

    def create_database(self, name: str | None = None) -> str:
        """A new, empty database on the server; returns its URL."""
        import psycopg

        name = name or f"tir_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder."""
        try:
            if self.data.exists():
                self._pg_ctl(["-m", "fast", "-w", "stop"], 60)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
