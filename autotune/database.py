"""Tuning-record database: SQLite (through sqlite-utils) plus sorted JSON Lines export.

One row per measured configuration, keyed by ``id`` = sha1 of (workload key, device, target,
schema version, canonical config JSON), so re-measuring a configuration replaces its row.
Each :meth:`Database.add` is one committed transaction (WAL mode), so a crashed tuner loses
nothing it had finished and several processes may write to one file at once.

Record dicts (what :meth:`Database.add` takes and the queries return)::

    workload_key: str, device: str, config: dict/list (JSON),
    target: str = "", costs: list[float] = [] (seconds), mean_cost: float (inf on error),
    error: str | None, timestamp: float, host: str, tensorir_version: str,
    schema_version: int = SCHEMA_VERSION, id: str (derived)

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
}


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


def record_id(workload_key: str, device: str, target: str, schema_version: int, config: Any) -> str:
    key = _canonical([workload_key, device, target, int(schema_version), config])
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
    return {
        "id": record_id(record["workload_key"], record["device"], target, schema, config),
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
    }


def _to_record(row: dict) -> dict:
    out = dict(row)
    out["config"] = json.loads(row["config"])
    out["costs"] = [math.inf if c is None else c for c in json.loads(row["costs"])]
    out["mean_cost"] = math.inf if row["mean_cost"] is None else row["mean_cost"]
    return out


def _to_json_line(row: dict) -> str:
    out = dict(row)
    out["config"] = json.loads(row["config"])
    out["costs"] = json.loads(row["costs"])
    return json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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

    def prune(self, device: str, keep_top: int = 10) -> int:
        """Keep, per workload of ``device``, the ``keep_top`` best successful records of the
        current schema; delete the rest (errors included). Returns the number deleted."""
        keep: set[str] = set()
        sql = (
            f"SELECT id, workload_key FROM {TABLE} WHERE device = ? AND schema_version = ? "
            "AND error IS NULL AND mean_cost IS NOT NULL ORDER BY workload_key, mean_cost, id"
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
        """The lowest-mean-cost successful record of the current schema, or None."""
        rows = list(
            self.table.rows_where(
                "workload_key = ? AND device = ? AND schema_version = ? "
                "AND error IS NULL AND mean_cost IS NOT NULL",
                [workload_key, device, SCHEMA_VERSION],
                order_by="mean_cost, id",
                limit=1,
            )
        )
        return _to_record(rows[0]) if rows else None

    def records(self, device: str | None = None) -> list[dict]:
        """All records (optionally of one device), sorted by (workload_key, device, id)."""
        return [_to_record(r) for r in self._rows(device)]

    def _rows(self, device: str | None) -> Iterator[dict]:
        where, args = ("device = ?", [device]) if device is not None else (None, None)
        return self.table.rows_where(where, args, order_by="workload_key, device, id")

    def __len__(self) -> int:
        return self.table.count

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

    def export_jsonl(self, path: str | os.PathLike, device: str | None = None) -> int:
        """Write records sorted by (workload_key, device, id), one per line with sorted keys
        (de-duplicated by id), atomically. Returns the number of lines."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [_to_json_line(r) for r in self._rows(device)]
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line + "\n")
        os.replace(tmp, path)
        return len(lines)

    def import_jsonl(self, path: str | os.PathLike) -> int:
        """Upsert every record of a JSON Lines file (one transaction). Returns the count."""
        records = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not a JSON record: {e}") from None
        return self.add_many(records)

    def merge(self, paths: Iterable[str | os.PathLike]) -> int:
        """Import several JSON Lines files; returns the total number of records read."""
        return sum(self.import_jsonl(p) for p in paths)
