"""Fixtures of the autotune tests: a PostgreSQL server, and the tuning database on either backend.

- ``pg_server`` (session): a :class:`tests.pg_server.PgServer` started on first use and
  stopped at the end of the session (each xdist worker starts its own). No PostgreSQL
  binaries: the tests that use it fail (never skip).
- ``pg_url``: the URL of a new, empty database on that server.
- ``backend``: parametrized over "sqlite" and "postgres"; ``backend.spec(name)`` is what
  ``--db`` takes for the database called ``name`` in this test (a file under tmp_path, or a
  database on the server), ``backend.open(name)`` opens it through
  :func:`autotune.db_open.open_database`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.db_open import open_database
from autotune.db_store import RecordStore
from tests.pg_server import PgServer


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server = PgServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    return pg_server.create_database()


class Backend:
    """One test's tuning databases on one backend, by name."""

    def __init__(self, kind: str, tmp_path: Path, server: PgServer | None):
        self.kind = kind
        self.tmp_path = tmp_path
        self.server = server
        self._specs: dict[str, str] = {}

    def spec(self, name: str = "t") -> str:
        if name not in self._specs:
            if self.server is None:
                self._specs[name] = str(self.tmp_path / f"{name}.db")
            else:
                self._specs[name] = self.server.create_database()
        return self._specs[name]

    def open(self, name: str = "t") -> RecordStore:
        return open_database(self.spec(name))

    def __repr__(self) -> str:
        return self.kind


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    server = request.getfixturevalue("pg_server") if request.param == "postgres" else None
    return Backend(request.param, tmp_path, server)
