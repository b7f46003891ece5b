"""What every tuning-database backend does, written once in SQL both SQLite and PostgreSQL take.

:class:`RecordStore` implements the public methods of the tuning database (add, best,
records, prune, stats, JSON Lines import / export, ...) on top of five primitives a backend
provides: ``_select`` (rows as dicts), ``_query`` (rows as tuples), ``_execute`` and
``_executemany`` (inside ``_write``, one committed transaction), plus ``close`` and
``size_bytes``. The SQL uses ``?`` placeholders (a backend that wants ``%s`` converts them)
and no dialect-only syntax: the upsert is ``INSERT ... ON CONFLICT (id) DO UPDATE``.

Semantics (the same for every backend): one row per record id, re-measuring a configuration
replaces its row; failed measurements are kept (``error`` set, ``mean_cost`` NULL) and never
returned as best; a record timed inside the model by the workload's newest in-model check
outranks every record of its workload timed alone, whatever their costs
(:data:`autotune.record_format.NEWEST_CHECK_FIRST`); an older check's verdicts rank last.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from autotune.record_format import (
    CHECKED,
    COLUMNS,
    NEWEST_CHECK_FIRST,
    SCHEMA_VERSION,
    TABLE,
    best_query,
    load_jsonl,
    normalize,
    to_record,
    write_jsonl,
)

UPSERT_SQL = (
    f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))}) "
    f"ON CONFLICT (id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in COLUMNS if c != 'id')}"
)
CHUNK = 500  # ids per IN (...) list


def cursor_dicts(cur: Any) -> list[dict]:
    """The rows of an executed DB-API cursor as {column: value} dicts."""
    names = [d[0] for d in cur.description]
    return [dict(zip(names, values, strict=True)) for values in cur.fetchall()]


def strip_rank(rows: list[dict], keep_checked: bool = False) -> list[dict]:
    """Rows of :func:`autotune.record_format.best_query` without its helper columns
    (``keep_checked``: but the timestamp of the workload's newest in-model check, _checked)."""
    for row in rows:
        row.pop("_rank", None)
        if not keep_checked:
            row.pop("_checked", None)
    return rows


class RecordStore(ABC):
    """The tuning database's public methods over a backend's primitives (see the module)."""

    path: Any  # what messages call the database: a file path, or a URL without its password

    # -- the backend's primitives -------------------------------------------------------------

    @abstractmethod
    def _select(self, sql: str, args: Sequence[Any] = ()) -> list[dict]:
        """The rows of a query (``?`` placeholders) as {column: value} dicts."""

    @abstractmethod
    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        """The rows of a query as tuples."""

    @abstractmethod
    def _execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement inside :meth:`_write`; returns the row count."""

    @abstractmethod
    def _executemany(self, sql: str, rows: list[list[Any]]) -> None:
        """Run one statement per argument list, inside :meth:`_write`."""

    @abstractmethod
    def _write(self) -> AbstractContextManager[Any]:
        """One write transaction, committed when the block ends without an exception."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""

    @abstractmethod
    def local_file(self, name: str) -> Path:
        """Where a local file that goes with this database is kept (the tuner's cost model)."""

    @abstractmethod
    def size_bytes(self) -> int:
        """Bytes the records take on disk."""

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------

    def _upsert(self, rows: list[dict]) -> None:
        if rows:
            self._executemany(UPSERT_SQL, [[r[c] for c in COLUMNS] for r in rows])

    def add(self, record: dict) -> None:
        """Store one record (upsert on its id) and commit before returning."""
        self.add_many([record])

    def add_many(self, records: Iterable[dict]) -> int:
        """Store records in one transaction (all or nothing); returns how many."""
        rows = [normalize(r) for r in records]
        if rows:
            with self._write():
                self._upsert(rows)
        return len(rows)

    def rename_device(self, old: str, new: str) -> int:
        """Re-key every record of device `old` as `new` (ids recomputed; one transaction).
        Returns how many records moved."""
        rows = [normalize({**r, "device": new}) for r in self._select(self._where("device = ?"), [old])]
        with self._write():
            self._upsert(rows)
            self._execute(f"DELETE FROM {TABLE} WHERE device = ?", [old])
        return len(rows)

    def forget(self, workload_key: str, device: str) -> int:
        """Delete every record of one workload on ``device`` (graph_tune: a model-level round
        measured again replaces the last one, whose timings came from other code). Returns
        how many."""
        with self._write():
            sql = f"DELETE FROM {TABLE} WHERE workload_key = ? AND device = ?"
            return self._execute(sql, [workload_key, device])

    def prune(self, device: str, keep_top: int | None = 10, drop_errors: bool = True) -> int:
        """Keep, per workload of ``device``, the ``keep_top`` best successful records of the
        current schema; delete the rest (errors too, unless ``drop_errors`` is false).
        ``keep_top=None`` keeps every successful record (only errors go). Returns the number
        deleted."""
        if keep_top is None:
            if not drop_errors:
                return 0
            with self._write():
                return self._execute(f"DELETE FROM {TABLE} WHERE device = ? AND error IS NOT NULL", [device])
        keep: set[str] = set()
        if not drop_errors:
            errs = f"SELECT id FROM {TABLE} WHERE device = ? AND error IS NOT NULL"
            keep.update(r[0] for r in self._query(errs, [device]))
        sql = (
            f"SELECT id, workload_key FROM (SELECT *, {CHECKED} FROM {TABLE} WHERE device = ? "
            "AND schema_version = ? AND error IS NULL AND mean_cost IS NOT NULL) AS checked "
            f"ORDER BY workload_key, {NEWEST_CHECK_FIRST}mean_cost, id"
        )
        seen: dict[str, int] = {}
        for rid, wk in self._query(sql, [device, SCHEMA_VERSION]):
            if seen.get(wk, 0) < keep_top:
                seen[wk] = seen.get(wk, 0) + 1
                keep.add(rid)
        ids = [r[0] for r in self._query(f"SELECT id FROM {TABLE} WHERE device = ?", [device])]
        drop = [i for i in ids if i not in keep]
        with self._write():
            for i in range(0, len(drop), CHUNK):
                chunk = drop[i : i + CHUNK]
                self._execute(f"DELETE FROM {TABLE} WHERE id IN ({','.join('?' * len(chunk))})", chunk)
        return len(drop)

    # -- reading -----------------------------------------------------------------------------

    @staticmethod
    def _where(cond: str, order: str = "workload_key, device, id") -> str:
        return f"SELECT * FROM {TABLE} WHERE {cond} ORDER BY {order}"

    def best(self, workload_key: str, device: str) -> dict | None:
        """The lowest-mean-cost successful record of the current schema (one timed in the
        model by the workload's newest in-model check first), or None."""
        rows = strip_rank(self._select(*best_query(device, None, workload_key=workload_key)))
        return to_record(rows[0]) if rows else None

    def workload_records(self, workload_key: str, device: str, target: str | None = None) -> list[dict]:
        """Every record (errors too) of one workload on one device, current schema, by id."""
        cond = "workload_key = ? AND device = ? AND schema_version = ?"
        args: list[Any] = [workload_key, device, SCHEMA_VERSION]
        if target is not None:
            cond += " AND target = ?"
            args.append(target)
        return [to_record(r) for r in self._select(self._where(cond, "id"), args)]

    def records(self, device: str | None = None) -> list[dict]:
        """All records (optionally of one device), sorted by (workload_key, device, id)."""
        return [to_record(r) for r in self.rows(device)]

    def rows(self, device: str | None = None) -> list[dict]:
        """All stored rows (see :func:`autotune.record_format.normalize`), optionally of one
        device, sorted by (workload_key, device, id): what :meth:`import_rows` takes."""
        if device is None:
            return self._select(self._where("1 = 1"))
        return self._select(self._where("device = ?"), [device])

    def best_rows(
        self,
        device: str | None = None,
        target: str | None = None,
        timed_alone: bool = False,
        checked: bool = False,
    ) -> list[dict]:
        """The best stored row per (workload_key, device), sorted by that pair
        (``timed_alone``: of the records timed alone; ``checked``: each row with _checked)."""
        return strip_rank(self._select(*best_query(device, target, timed_alone=timed_alone)), checked)

    def __len__(self) -> int:
        return int(self._query(f"SELECT COUNT(*) FROM {TABLE}")[0][0])

    def devices(self) -> list[str]:
        """The devices that have records, sorted."""
        return [r[0] for r in self._query(f"SELECT DISTINCT device FROM {TABLE} ORDER BY device")]

    def workload_count(self, device: str | None = None) -> int:
        """How many distinct workload keys have records (of ``device``, or of any device)."""
        where, args = (" WHERE device = ?", [device]) if device is not None else ("", [])
        return int(self._query(f"SELECT COUNT(DISTINCT workload_key) FROM {TABLE}{where}", args)[0][0])

    def record_counts(self, device: str | None = None) -> dict[tuple[str, str], int]:
        """{(workload_key, device): number of records, errors included}."""
        where, args = (" WHERE device = ?", [device]) if device is not None else ("", [])
        sql = f"SELECT workload_key, device, COUNT(*) FROM {TABLE}{where} GROUP BY workload_key, device"
        return {(w, d): int(n) for w, d, n in self._query(sql, args)}

    def best_records(self, device: str | None = None, target: str | None = None) -> list[dict]:
        """The best successful record per (workload_key, device), sorted by that pair."""
        return [to_record(r) for r in self.best_rows(device, target)]

    def stats(self) -> dict:
        """{"count": n, "errors": n, "devices": {device: {"count": n, "errors": n}}}."""
        sql = f"SELECT device, COUNT(*), COUNT(error) FROM {TABLE} GROUP BY device ORDER BY device"
        devices = {d: {"count": int(c), "errors": int(e)} for d, c, e in self._query(sql)}
        return {
            "count": sum(v["count"] for v in devices.values()),
            "errors": sum(v["errors"] for v in devices.values()),
            "devices": devices,
        }

    # -- JSON Lines exchange -----------------------------------------------------------------

    def export_jsonl(
        self, path: str | os.PathLike, device: str | None = None, best_only: bool = False
    ) -> int:
        """Write records sorted by (workload_key, device, id), one per line with sorted keys
        (de-duplicated by id), atomically. ``best_only``: only the best successful record of
        each (workload_key, device). Returns the number of lines."""
        return write_jsonl(path, self.best_rows(device) if best_only else self.rows(device))

    def import_jsonl(self, path: str | os.PathLike) -> int:
        """Upsert every record of a JSON Lines file (one transaction). Returns the count.
        A malformed line raises :class:`RecordFormatError` (a ValueError) naming ``file:line``."""
        rows = load_jsonl(path)
        self.import_rows(rows)
        return len(rows)

    def import_rows(self, rows: Iterable[dict]) -> dict[str, int]:
        """Upsert already-normalized rows in one transaction; returns {"new": n, "replaced": n,
        "skipped": n} (skipped: a row with that id and the same content was already stored)."""
        counts = {"new": 0, "replaced": 0, "skipped": 0}
        todo: dict[str, dict] = {}
        for row in rows:
            todo[row["id"]] = row  # a later line with the same id wins, as with add_many
        with self._write():
            ids = list(todo)
            have: dict[str, dict] = {}
            for i in range(0, len(ids), CHUNK):
                chunk = ids[i : i + CHUNK]
                sql = f"SELECT * FROM {TABLE} WHERE id IN ({','.join('?' * len(chunk))})"
                have.update({r["id"]: r for r in self._select(sql, chunk)})
            write = []
            for rid, row in todo.items():
                if rid not in have:
                    counts["new"] += 1
                    write.append(row)
                elif have[rid] == row:
                    counts["skipped"] += 1
                else:
                    counts["replaced"] += 1
                    write.append(row)
            self._upsert(write)
        return counts

    def merge(self, paths: Iterable[str | os.PathLike]) -> int:
        """Import several JSON Lines files; returns the total number of records read."""
        return sum(self.import_jsonl(p) for p in paths)
