"""The tuning-record format, shared by every database backend and the JSON Lines logs.

A record dict (what a database's ``add`` takes and its queries return)::

    workload_key: str, device: str, config: dict/list (JSON),
    target: str = "", costs: list[float] = [] (seconds), mean_cost: float (inf on error),
    error: str | None, timestamp: float, host: str, tensorir_version: str,
    schema_version: int = SCHEMA_VERSION, id: str (derived),
    timing: str | None = how the costs were taken (TIMINGS; None: not said, older records)

is stored as a row (:func:`normalize`): JSON columns as canonical text, non-finite costs as
NULL, ``id`` = sha1 of (workload key, device, target, schema version, canonical config
JSON, and the timing when it is "model"). Logs are JSON Lines of rows, sorted by
:func:`line_sort_key`, one canonical line per id (:func:`write_jsonl`, :func:`merge_rows`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tensorir.errors import InputError

SCHEMA_VERSION = 1
TABLE = "records"

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


class RecordFormatError(InputError, ValueError):
    """A JSON Lines tuning log has a malformed line (the message names ``file:line``)."""


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


def to_record(row: dict) -> dict:
    """A stored row -> a record dict (JSON columns decoded, NULL costs as inf)."""
    out = dict(row)
    out["config"] = json.loads(row["config"])
    out["costs"] = [math.inf if c is None else c for c in json.loads(row["costs"])]
    out["mean_cost"] = math.inf if row["mean_cost"] is None else row["mean_cost"]
    return out


def to_json_line(row: dict) -> str:
    """A stored row -> its canonical JSON Lines text (no newline)."""
    out = dict(row)
    if out.get("timing") is None:  # older records: their lines stay as they were
        out.pop("timing", None)
    out["config"] = json.loads(row["config"])
    out["costs"] = json.loads(row["costs"])
    return json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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


# the configs an in-model check times as its baseline, written before its other verdicts of the
# workload: the defaults of a kernel (autotune/model_check.py), a model run without any records
BASELINES = ("{}", '{"kernel_records":false}')
# In-model records of a workload older than its newest baseline come from an earlier check:
# other code, another day's machine. Its costs cannot rank against the newest check's (a
# record of MobileNetV2-224's features.3 block timed 0.370 ms in the model two days before
# beat the defaults' 0.372 of the newest check, and ran 1.29x slower than them there), so
# the newest check alone speaks for the workload. _checked: that baseline's timestamp.
CHECKED = (
    "MAX(CASE WHEN COALESCE(timing, '') = 'model' AND config IN ({}) THEN timestamp END) "
    "OVER (PARTITION BY workload_key, device) AS _checked"
).format(", ".join("'" + b.replace("'", "''") + "'" for b in BASELINES))
# ORDER BY prefix over rows carrying _checked (the same text for SQLite and PostgreSQL): the
# newest check's in-model records, then the records timed alone, then an older check's
NEWEST_CHECK_FIRST = (
    "CASE WHEN COALESCE(timing, '') != 'model' THEN 1 "
    "WHEN _checked IS NULL OR timestamp >= _checked THEN 0 ELSE 2 END, "
)
BEST_SQL = (
    "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY workload_key, device "
    "ORDER BY {first}mean_cost, id) AS _rank FROM (SELECT *, {checked} "
    f"FROM {TABLE} WHERE schema_version = ? AND error IS NULL AND mean_cost IS NOT NULL{{where}}) AS checked"
    ") AS best WHERE _rank = 1 ORDER BY workload_key, device"
)


def best_query(
    device: str | None,
    target: str | None,
    model_first: bool = True,
    timed_alone: bool = False,
    workload_key: str | None = None,
) -> tuple[str, list]:
    """(SQL, arguments) of the best row per (workload_key, device) of the current schema,
    optionally of one device / target / workload; its rows carry two extra columns, _rank and
    _checked. ``model_first``: records timed in the model by the workload's newest check come
    first (NEWEST_CHECK_FIRST; a table with a timing column); ``timed_alone``: only records
    timed alone (the tuner's own, no in-model verdicts)."""
    where, args = " AND COALESCE(timing, '') != 'model'" if timed_alone else "", [SCHEMA_VERSION]
    if device is not None:
        where, args = where + " AND device = ?", [*args, device]
    if target is not None:
        where, args = where + " AND target = ?", [*args, target]
    if workload_key is not None:
        where, args = where + " AND workload_key = ?", [*args, workload_key]
    if not model_first:  # a table from before the timing column
        return BEST_SQL.format(where=where, first="", checked="NULL AS _checked"), args
    return BEST_SQL.format(where=where, first=NEWEST_CHECK_FIRST, checked=CHECKED), args


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """Write stored rows as canonical JSON Lines sorted by :func:`line_sort_key`, atomically
    (a temporary file renamed over ``path``). Returns the number of lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [to_json_line(r) for r in sorted(rows, key=line_sort_key)]
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
            key = (row["timestamp"], to_json_line(row), row)
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
