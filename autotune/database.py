"""Tuning-record database: SQLite (through sqlite-utils) plus sorted JSON Lines export.

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
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import sqlite_utils

from tensorir.errors import InputError

SCHEMA_VERSION = 1
TABLE = "records"
BUSY_TIMEOUT_S = 10.0

COLUMNS: dict[str, type] = {
    "id": str,
    "workload_key": str,
    "device": str,
    "target": str,
    "schema_version": int,
    "tensorir_version": str,
    "config": str,
    "costs": str,
    "mean_cost": float,
    "error": str,
    "timestamp": float,
    "host": str,
    "timing": str,
}
# "warm": the kernel alone, called back to back; "cold": alone, caches flushed before each
# timed call (what a model's kernels meet: weights come from memory); "model": in the model
TIMINGS = ("warm", "cold", "model")
MODEL_FIRST = "(timing IS 'model') DESC, "  # ORDER BY prefix: in-model records win


class RecordFormatError(InputError, ValueError):
    """A JSON Lines tuning log has a malformed line (the message names ``file:line``)."""


def default_path() -> Path:
    from tensorir import config

    return config.cache_dir() / "tuning.db"


def _tensorir_version() -> str:
    try:
        import tensorir

        return str(tensorir.__version__)
    except Exception:  # pragma: no cover - version lookup must never break recording
        return ""


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def record_id(
    workload_key: str, device: str, target: str, schema_version: int, config: Any, timing: str | None = None
) -> str:
    parts = [workload_key, device, target, int(schema_version), config]
    key = _canonical([*parts, timing] if timing == "model" else parts)
    return hashlib.sha1(key.encode("utf-8")).hexdigest()


def _finite_or_none(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def normalize(record: dict) -> dict:
    """A record dict -> the row stored (JSON columns as text, non-finite costs as NULL)."""
    for k in ("workload_key", "device"):
        if not isinstance(record.get(k), str) or not record[k]:
            raise ValueError(f"tuning record needs a non-empty string {k!r}")
    if "config" not in record:
        raise ValueError("tuning record needs 'config'")
    config = record["config"]
    if isinstance(config, str):  # already JSON text (e.g. a raw row)
        config = json.loads(config)
    target = str(record.get("target") or "")
    schema = int(record.get("schema_version", SCHEMA_VERSION))
    costs_in = record.get("costs") or []
    if isinstance(costs_in, str):
        costs_in = json.loads(costs_in)
    costs = [_finite_or_none(c) for c in costs_in]
    error = record.get("error")
    error = None if error in (None, "") else str(error)
    if error is not None:
        mean = None
    elif record.get("mean_cost") is not None:
        mean = _finite_or_none(record["mean_cost"])
    else:
        good = [c for c in costs if c is not None]
        mean = sum(good) / len(good) if good and len(good) == len(costs) else None
    if mean is None and error is None:
        error = "no finite measurement"
    ts = record.get("timestamp")
    timing = record.get("timing") or None
    if timing is not None and timing not in TIMINGS:
        raise ValueError(f"tuning record 'timing' must be one of {', '.join(TIMINGS)}, not {timing!r}")
    return {
        "id": record_id(record["workload_key"], record["device"], target, schema, config, timing),
        "workload_key": record["workload_key"],
        "device": record["device"],
        "target": target,
        "schema_version": schema,
        "tensorir_version": str(record.get("tensorir_version") or _tensorir_version()),
        "config": _canonical(config),
        "costs": _canonical(costs),
        "mean_cost": mean,
        "error": error,
        "timestamp": float(ts) if ts is not None else time.time(),
        "host": str(record.get("host") or socket.gethostname()),
        "timing": timing,
    }


def _to_record(row: dict) -> dict:
    out = dict(row)
    out["config"] = json.loads(row["config"])
    out["costs"] = [math.inf if c is None else c for c in json.loads(row["costs"])]
    out["mean_cost"] = math.inf if row["mean_cost"] is None else row["mean_cost"]
    return out


def _to_json_line(row: dict) -> str:
    out = dict(row)
    if out.get("timing") is None:  # older records: their lines stay as they were
        out.pop("timing", None)
    out["config"] = json.loads(row["config"])
    out["costs"] = json.loads(row["costs"])
    return json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


to_json_line = _to_json_line  # a stored row -> its canonical JSON Lines text (no newline)


def line_sort_key(row: dict) -> tuple[str, str, str]:
    """The order of lines in exported / merged JSON Lines files."""
    return (row["workload_key"], row["device"], row["id"])


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """(line number, record dict) for every non-blank line of a JSON Lines file, as written
    (not normalized). A line that is not a JSON object raises :class:`RecordFormatError`."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise RecordFormatError(f"{path}:{n}: not a JSON record: {e}") from None
            if not isinstance(obj, dict):
                raise RecordFormatError(f"{path}:{n}: not a JSON record: expected an object")
            yield n, obj


def normalize_at(record: dict, path: str | os.PathLike, lineno: int) -> dict:
    """:func:`normalize`, with a bad record reported as ``file:line``."""
    try:
        return normalize(record)
    except (ValueError, TypeError) as e:
        raise RecordFormatError(f"{path}:{lineno}: bad tuning record: {e}") from None


def load_jsonl(path: str | os.PathLike) -> list[dict]:
    """Every record of a JSON Lines file as stored rows (see :func:`normalize`)."""
    return [normalize_at(obj, path, n) for n, obj in read_jsonl(path)]


BEST_SQL = (
    "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY workload_key, device "
    "ORDER BY {first}mean_cost, id) AS _rank, COUNT(*) OVER (PARTITION BY workload_key, device) AS _n "
    f"FROM {TABLE} WHERE schema_version = ? AND error IS NULL AND mean_cost IS NOT NULL{{where}}) "
    "WHERE _rank = 1 ORDER BY workload_key, device"
)


def best_rows(conn: Any, device: str | None = None, target: str | None = None) -> list[dict]:
    """The best stored row per (workload_key, device) of the current schema, read through
    ``conn`` (a sqlite3 or sqlite-utils connection), optionally of one device / target.
    Records timed in the model come first (a read-only file from before the timing column
    has none)."""
    where, args = "", [SCHEMA_VERSION]
    if device is not None:
        where, args = where + " AND device = ?", [*args, device]
    if target is not None:
        where, args = where + " AND target = ?", [*args, target]
    columns = {r[1] for r in conn.execute(f"PRAGMA table_info({TABLE})")}
    first = MODEL_FIRST if "timing" in columns else ""
    cur = conn.execute(BEST_SQL.format(where=where, first=first), args)
    names = [d[0] for d in cur.description]
    out = []
    for values in cur.fetchall():
        row = dict(zip(names, values, strict=True))
        row.pop("_rank")
        row.pop("_n")
        out.append(row)
    return out


class Database:
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

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------

    def add(self, record: dict) -> None:
        """Store one record (upsert on its id) and commit before returning."""
        self.add_many([record])

    def add_many(self, records: Iterable[dict]) -> int:
        """Store records in one transaction (all or nothing); returns how many."""
        rows = [normalize(r) for r in records]
        if rows:
            with self._write():
                self.table.upsert_all(rows, pk="id")
        return len(rows)

    def rename_device(self, old: str, new: str) -> int:
        """Re-key every record of device `old` as `new` (ids recomputed; one transaction).
        Returns how many records moved."""
        rows = [normalize({**r, "device": new}) for r in self.table.rows_where("device = ?", [old])]
        with self._write():
            self.table.upsert_all(rows, pk="id")
            self.db.execute(f"DELETE FROM {TABLE} WHERE device = ?", [old])
        return len(rows)

    def prune(self, device: str, keep_top: int | None = 10, drop_errors: bool = True) -> int:
        """Keep, per workload of ``device``, the ``keep_top`` best successful records of the
        current schema; delete the rest (errors too, unless ``drop_errors`` is false).
        ``keep_top=None`` keeps every successful record (only errors go). Returns the number
        deleted."""
        if keep_top is None:
            if not drop_errors:
                return 0
            with self._write():
                cur = self.db.execute(f"DELETE FROM {TABLE} WHERE device = ? AND error IS NOT NULL", [device])
            return cur.rowcount
        keep: set[str] = set()
        if not drop_errors:
            errs = f"SELECT id FROM {TABLE} WHERE device = ? AND error IS NOT NULL"
            keep.update(r[0] for r in self.db.execute(errs, [device]))
        sql = (
            f"SELECT id, workload_key FROM {TABLE} WHERE device = ? AND schema_version = ? "
            f"AND error IS NULL AND mean_cost IS NOT NULL ORDER BY workload_key, {MODEL_FIRST}mean_cost, id"
        )
        seen: dict[str, int] = {}
        for rid, wk in self.db.execute(sql, [device, SCHEMA_VERSION]).fetchall():
            if seen.get(wk, 0) < keep_top:
                seen[wk] = seen.get(wk, 0) + 1
                keep.add(rid)
        ids = [r[0] for r in self.db.execute(f"SELECT id FROM {TABLE} WHERE device = ?", [device])]
        drop = [i for i in ids if i not in keep]
        with self._write():
            for i in range(0, len(drop), 500):
                chunk = drop[i : i + 500]
                marks = ",".join("?" * len(chunk))
                self.db.execute(f"DELETE FROM {TABLE} WHERE id IN ({marks})", chunk)
        return len(drop)

    # -- reading -----------------------------------------------------------------------------

    def best(self, workload_key: str, device: str) -> dict | None:
        """The lowest-mean-cost successful record of the current schema (one timed in the
        model first), or None."""
        rows = list(
            self.table.rows_where(
                "workload_key = ? AND device = ? AND schema_version = ? "
                "AND error IS NULL AND mean_cost IS NOT NULL",
                [workload_key, device, SCHEMA_VERSION],
                order_by=f"{MODEL_FIRST}mean_cost, id",
                limit=1,
            )
        )
        return _to_record(rows[0]) if rows else None

    def workload_records(self, workload_key: str, device: str, target: str | None = None) -> list[dict]:
        """Every record (errors too) of one workload on one device, current schema, by id."""
        where = "workload_key = ? AND device = ? AND schema_version = ?"
        args: list[Any] = [workload_key, device, SCHEMA_VERSION]
        if target is not None:
            where += " AND target = ?"
            args.append(target)
        return [_to_record(r) for r in self.table.rows_where(where, args, order_by="id")]

    def records(self, device: str | None = None) -> list[dict]:
        """All records (optionally of one device), sorted by (workload_key, device, id)."""
        return [_to_record(r) for r in self._rows(device)]

    def _rows(self, device: str | None) -> Iterator[dict]:
        where, args = ("device = ?", [device]) if device is not None else (None, None)
        return self.table.rows_where(where, args, order_by="workload_key, device, id")

    def __len__(self) -> int:
        return self.table.count

    def devices(self) -> list[str]:
        """The devices that have records, sorted."""
        return [r[0] for r in self.db.execute(f"SELECT DISTINCT device FROM {TABLE} ORDER BY device")]

    def workload_count(self, device: str | None = None) -> int:
        """How many distinct workload keys have records (of ``device``, or of any device)."""
        where, args = (" WHERE device = ?", [device]) if device is not None else ("", [])
        sql = f"SELECT COUNT(DISTINCT workload_key) FROM {TABLE}{where}"
        return int(self.db.execute(sql, args).fetchone()[0])

    def record_counts(self, device: str | None = None) -> dict[tuple[str, str], int]:
        """{(workload_key, device): number of records, errors included}."""
        where, args = (" WHERE device = ?", [device]) if device is not None else ("", [])
        sql = f"SELECT workload_key, device, COUNT(*) FROM {TABLE}{where} GROUP BY workload_key, device"
        return {(w, d): n for w, d, n in self.db.execute(sql, args).fetchall()}

    def best_records(self, device: str | None = None, target: str | None = None) -> list[dict]:
        """The best successful record per (workload_key, device), sorted by that pair."""
        return [_to_record(r) for r in best_rows(self.db, device, target)]

    def size_bytes(self) -> int:
        """Bytes on disk: the database file plus its WAL."""
        files = [self.path, self.path.with_name(self.path.name + "-wal")]
        return sum(f.stat().st_size for f in files if f.exists())

    def stats(self) -> dict:
        """{"count": n, "errors": n, "devices": {device: {"count": n, "errors": n}}}."""
        sql = f"SELECT device, COUNT(*), SUM(error IS NOT NULL) FROM {TABLE} GROUP BY device ORDER BY device"
        devices = {d: {"count": c, "errors": int(e or 0)} for d, c, e in self.db.execute(sql).fetchall()}
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
        rows = best_rows(self.db, device) if best_only else self._rows(device)
        return write_jsonl(path, rows)

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
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                have.update(
                    {
                        r["id"]: r
                        for r in self.table.rows_where(f"id IN ({','.join('?' * len(chunk))})", chunk)
                    }
                )
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
            if write:
                self.table.upsert_all(write, pk="id")
        return counts

    def merge(self, paths: Iterable[str | os.PathLike]) -> int:
        """Import several JSON Lines files; returns the total number of records read."""
        return sum(self.import_jsonl(p) for p in paths)


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """Write stored rows as canonical JSON Lines sorted by :func:`line_sort_key`, atomically
    (a temporary file renamed over ``path``). Returns the number of lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [_to_json_line(r) for r in sorted(rows, key=line_sort_key)]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")
    os.replace(tmp, path)
    return len(lines)


def merge_rows(logs: Iterable[Iterable[dict]], base: Iterable[dict] | None = None) -> list[dict]:
    """Union of several logs of stored rows, one row per id, sorted by :func:`line_sort_key`.

    Where logs disagree about one id, the row with the later ``timestamp`` wins (ties: the
    greater canonical line), so the result does not depend on the order of the logs and
    merging a result again changes nothing. With ``base`` (the common ancestor of a three-way
    merge), an id present in the base but missing from any log was deleted there (pruned)
    and stays deleted."""
    logs = [list(log) for log in logs]
    chosen: dict[str, tuple[float, str, dict]] = {}
    for log in logs:
        for row in log:
            key = (row["timestamp"], _to_json_line(row), row)
            old = chosen.get(row["id"])
            if old is None or key[:2] > old[:2]:
                chosen[row["id"]] = key
    if base is not None:
        base_ids = {r["id"] for r in base}
        for log in logs:
            ids = {r["id"] for r in log}
            for rid in base_ids - ids:
                chosen.pop(rid, None)
    return sorted((v[2] for v in chosen.values()), key=line_sort_key)
