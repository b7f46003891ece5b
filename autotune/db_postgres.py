"""Tuning-record database, the PostgreSQL backend (psycopg 3): one server for a whole team.

    db = PostgresDatabase("postgresql://tuner@db.example/tir")   # what `--db postgresql://...` opens

The same methods and semantics as the SQLite :class:`autotune.database.Database` (both are
:class:`autotune.db_store.RecordStore`): the same rows and record ids, one committed
transaction per ``add``, idempotent upserts (``INSERT ... ON CONFLICT (id) DO UPDATE``), so
any number of tuners on any number of hosts may write at once.

Credentials come from the URL or libpq's environment (PGHOST, PGUSER, PGPASSWORD,
PGPASSFILE, ...); messages show the URL with its password masked (``.path``). psycopg is
imported only here, so SQLite users never load it.

The schema is a list of migrations (:data:`MIGRATIONS`); opening a database applies those it
lacks and records the count in the ``schema_version`` table, in one transaction under an
advisory lock, so tuners that open a new database at the same moment do not race. Text
columns sort by byte value (``COLLATE "C"``), as SQLite's do, so exported logs are the same.
"""

from __future__ import annotations

import contextlib
import re
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from autotune.db_open import mask_url
from autotune.db_store import RecordStore, cursor_dicts
from autotune.record_format import TABLE
from tensorir.errors import InputError

CONNECT_TIMEOUT_S = 10
MIGRATION_LOCK = zlib.crc32(b"tensorir tuning database migrations")  # pg_advisory_xact_lock key
_TEXT = 'TEXT COLLATE "C"'

# Each entry: the statements that take the schema from version k to k + 1. Append, never edit.
MIGRATIONS: list[tuple[str, ...]] = [
    (  # 1: the records table (the columns of autotune.record_format.COLUMNS)
        f"CREATE TABLE {TABLE} (id {_TEXT} PRIMARY KEY, workload_key {_TEXT} NOT NULL, "
        f"device {_TEXT} NOT NULL, target {_TEXT}, schema_version INTEGER, tensorir_version {_TEXT}, "
        f"config {_TEXT}, costs {_TEXT}, mean_cost DOUBLE PRECISION, error {_TEXT}, "
        f"timestamp DOUBLE PRECISION, host {_TEXT}, timing {_TEXT})",
    ),
    (  # 2: the best-record lookups (tir compile, Database.best) and per-workload listings
        f"CREATE INDEX idx_records_best ON {TABLE} (device, workload_key, mean_cost)",
    ),
]


def _psycopg(where: str) -> Any:
    try:
        import psycopg
    except ModuleNotFoundError:
        raise InputError(f"{where}: PostgreSQL needs psycopg (pip install 'psycopg[binary]')") from None
    return psycopg


def _one_line(e: BaseException) -> str:
    return re.sub(r"\s+", " ", str(e)).strip() or type(e).__name__


def schema_version(conn: Any) -> int:
    """The migration count recorded in ``conn``'s database (0: none applied)."""
    if conn.execute("SELECT to_regclass('schema_version')").fetchone()[0] is None:
        return 0
    return conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]


def migrate(conn: Any, upto: int | None = None) -> int:
    """Apply the migrations ``conn``'s database lacks (up to ``upto``; default all) in one
    transaction under an advisory lock (a database already up to date is only read: a role
    without CREATE rights can use it). Returns the schema version now."""
    want = len(MIGRATIONS) if upto is None else upto
    have = schema_version(conn)
    if have < want:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            have = schema_version(conn)  # another process may have migrated while we waited
            for statements in MIGRATIONS[have:want]:
                for sql in statements:
                    conn.execute(sql)
            if want > have:
                conn.execute("DELETE FROM schema_version")
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", [want])
    if have > len(MIGRATIONS):
        raise InputError(
            f"schema version {have} is newer than this tensorir's ({len(MIGRATIONS)}): upgrade tensorir"
        )
    return max(have, want)


class PostgresDatabase(RecordStore):
    """The tuning database on a PostgreSQL server (see the module docstring)."""

    def __init__(self, url: str, connect_timeout_s: int = CONNECT_TIMEOUT_S):
        self.path = mask_url(url)
        psycopg = self._pg = _psycopg(self.path)
        try:
            self.conn = psycopg.connect(url, autocommit=True, connect_timeout=connect_timeout_s)
        except psycopg.Error as e:
            raise InputError(f"{self.path}: cannot connect to PostgreSQL: {_one_line(e)}") from None
        try:
            migrate(self.conn)
        except (psycopg.Error, InputError) as e:
            self.conn.close()
            what = "cannot set up the tuning tables: " if isinstance(e, psycopg.Error) else ""
            raise InputError(f"{self.path}: {what}{_one_line(e)}") from None
        except BaseException:
            self.conn.close()
            raise

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    @contextlib.contextmanager
    def _server(self) -> Iterator[None]:
        """A server lost in the middle of a run (stopped, network gone) is one line, exit 2,
        not a psycopg traceback; what was committed before stays."""
        try:
            yield
        except self._pg.OperationalError as e:
            raise InputError(f"{self.path}: lost the connection to PostgreSQL: {_one_line(e)}") from None

    def _select(self, sql: str, args: Sequence[Any] = ()) -> list[dict]:
        with self._server():
            return cursor_dicts(self.conn.execute(self._sql(sql), list(args)))

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._server():
            return self.conn.execute(self._sql(sql), list(args)).fetchall()

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        with self._server():
            return self.conn.execute(self._sql(sql), list(args)).rowcount

    def _executemany(self, sql: str, rows: list[list[Any]]) -> None:
        with self._server(), self.conn.cursor() as cur:
            cur.executemany(self._sql(sql), rows)

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        with self._server(), self.conn.transaction():
            yield

    def close(self) -> None:
        self.conn.close()

    def local_file(self, name: str) -> Path:
        """``name`` in a folder of the user cache for this server and database
        ($TIR_CACHE_DIR/postgres/<host>-<port>-<dbname>/)."""
        from tensorir import config

        info = self.conn.info
        folder = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{info.host}-{info.port}-{info.dbname}")
        return config.cache_dir() / "postgres" / folder / name

    def size_bytes(self) -> int:
        """Bytes the records table takes on the server (with its indexes and TOAST)."""
        return int(self._query(f"SELECT pg_total_relation_size('{TABLE}')")[0][0])
