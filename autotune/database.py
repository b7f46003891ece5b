"""Tuning-record database, the SQLite backend (through sqlite-utils): the default, one file.

One row per measured configuration, keyed by ``id`` = sha1 of (workload key, device, target,
schema version, canonical config JSON), so re-measuring a configuration replaces its row.
Each :meth:`Database.add` is one committed transaction (WAL mode), so a crashed tuner loses
nothing it had finished and several processes may write to one file at once.

Record dicts (what :meth:`Database.add` takes and the queries return)::

    workload_key: str, device: str, config: dict/list (JSON),
    target: str = "", costs: list[float] = [] (seconds), mean_cost: float (inf on error),
    error: str | None, timestamp: float, host: str, tensorir_version: str,
    schema_version: int = SCHEMA_VERSION, id: str (derived),
    timing: str | None = how the costs were taken (TIMINGS; None: not said, older records)

A record timed inside the whole model (``timing`` "model": written by the in-model check at
the end of ``tir tune``, autotune/model_check.py) measured what the model sees; for its
workload it outranks every record timed alone, whatever their costs, and it is kept beside
the alone record of the same config (its id includes the timing).

Failed measurements carry ``error`` (the reason) and ``mean_cost`` inf (stored NULL); they are
kept so the tuner does not retry them, and never returned by :meth:`Database.best`.

The methods are :class:`autotune.db_store.RecordStore`'s (shared with the PostgreSQL backend,
autotune/db_postgres.py); the record format and JSON Lines helpers live in
autotune/record_format.py and are re-exported here.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlite_utils

from autotune.db_store import RecordStore, cursor_dicts, strip_rank
from autotune.record_format import (  # re-exported: the record format's historical home
    COLUMNS,
    NEWEST_CHECK_FIRST,
    SCHEMA_VERSION,
    TABLE,
    TIMINGS,
    RecordFormatError,
    best_query,
    line_sort_key,
    load_jsonl,
    merge_rows,
    normalize,
    normalize_at,
    read_jsonl,
    record_id,
    to_json_line,
    to_record,
    write_jsonl,
)

__all__ = [
    "COLUMNS",
    "NEWEST_CHECK_FIRST",
    "SCHEMA_VERSION",
    "TABLE",
    "TIMINGS",
    "Database",
    "RecordFormatError",
    "best_rows",
    "default_path",
    "line_sort_key",
    "load_jsonl",
    "merge_rows",
    "normalize",
    "normalize_at",
    "read_jsonl",
    "record_id",
    "to_json_line",
    "to_record",
    "write_jsonl",
]

BUSY_TIMEOUT_S = 10.0


def default_path() -> Path:
    from tensorir import config

    return config.cache_dir() / "tuning.db"


def best_rows(
    conn: Any,
    device: str | None = None,
    target: str | None = None,
    timed_alone: bool = False,
    checked: bool = False,
) -> list[dict]:
    """The best stored row per (workload_key, device) of the current schema, read through
    ``conn`` (a sqlite3 or sqlite-utils connection), optionally of one device / target.
    Records timed in the model come first (a read-only file from before the timing column
    has none); ``timed_alone``: only records timed alone."""
    columns = {r[1] for r in conn.execute(f"PRAGMA table_info({TABLE})")}
    has_timing = "timing" in columns
    sql, args = best_query(device, target, model_first=has_timing, timed_alone=timed_alone and has_timing)
    return strip_rank(cursor_dicts(conn.execute(sql, args)), checked)


class Database(RecordStore):
    """The local tuning database (one SQLite file; safe for concurrent writer processes)."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S)
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        self.db = sqlite_utils.Database(conn, execute_plugins=False)
        if self.db.journal_mode != "wal":
            self.db.enable_wal()
        self.db.execute("PRAGMA synchronous=NORMAL")
        with self._write():
            self.table.create(COLUMNS, pk="id", not_null={"workload_key", "device"}, if_not_exists=True)
            self.table.create_index(
                ["workload_key", "device", "schema_version"],
                index_name="idx_records_workload",
                if_not_exists=True,
            )
            if "timing" not in self.table.columns_dict:  # a file from before the column
                self.table.add_column("timing", str)

    @property
    def table(self) -> sqlite_utils.db.Table:
        return self.db.table(TABLE)

    def _write(self):
        """One write transaction, taking the write lock up front (no snapshot-upgrade BUSY)."""
        db = self.db

        class _Tx:
            def __enter__(self_inner):
                db.execute("BEGIN IMMEDIATE")
                return db

            def __exit__(self_inner, exc_type, exc, tb):
                if exc_type is None:
                    db.execute("COMMIT")
                else:
                    db.rollback()
                return False

        return _Tx()

    def _select(self, sql: str, args: Sequence[Any] = ()) -> list[dict]:
        return cursor_dicts(self.db.execute(sql, list(args)))

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        return self.db.execute(sql, list(args)).fetchall()

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        return self.db.execute(sql, list(args)).rowcount

    def _executemany(self, sql: str, rows: list[list[Any]]) -> None:
        self.db.conn.executemany(sql, rows)

    def close(self) -> None:
        self.db.close()

    def local_file(self, name: str) -> Path:
        """``name`` beside the database file."""
        return self.path.with_name(name)

    def size_bytes(self) -> int:
        """Bytes on disk: the database file plus its WAL."""
        files = [self.path, self.path.with_name(self.path.name + "-wal")]
        return sum(f.stat().st_size for f in files if f.exists())
