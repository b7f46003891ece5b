"""Best-record lookup over the local tuning database and a folder of shared JSON Lines logs.

This is what ``tensorir.compile(..., records=...)`` receives::

    from autotune.records import Records

    recs = Records.open(device="cpu-x86")  # default db + ./tuning_logs (if it exists)
    cfg = recs.best(workload_key)  # the config dict of the fastest record, or None

Both sources are read once, when the object is built: the database (read-only; a missing
file is an empty source) through one query for the best row per workload, and the log
``<logs>/<device>.jsonl`` (or ``logs`` itself when it names a file) line by line. Error
records, records of other devices (or other targets, when ``target`` is given) and records
of another schema version are ignored. Across sources a record timed inside the model
(``timing`` "model") wins over records timed alone, if it comes from the workload's newest
in-model check (not older than its newest baseline verdict, record_format.BASELINES: an
older check's costs were taken with other code on another day); then the lowest
``mean_cost`` (ties: the smaller record id, then the database).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from pathlib import Path
from typing import Any

from autotune import database
from autotune.db_open import open_database, postgres_url
from autotune.record_format import BASELINES
from tensorir.errors import InputError

DEFAULT_LOGS = Path("tuning_logs")
BASELINE_CONFIGS = [json.loads(b) for b in BASELINES]  # an in-model check's first verdicts
Hit = tuple[float, str, int, object, str]  # mean_cost, id, source rank, config, source


def _fast_ok(obj: dict, cost: object) -> bool:
    """A complete, well-typed exported line (no need to re-derive it through normalize)."""
    return (
        isinstance(obj.get("id"), str)
        and isinstance(obj.get("workload_key"), str)
        and obj["workload_key"] != ""
        and "config" in obj
        and isinstance(cost, int | float)
        and not isinstance(cost, bool)
        and math.isfinite(cost)
        and isinstance(obj.get("schema_version", 0), int)
    )


class Records:
    """Best tuning record per workload for one device (and optionally one target)."""

    def __init__(self, device: str = "host", target: str | None = None, timed_alone: bool = False):
        self.device = device
        self.target = target
        self.timed_alone = timed_alone  # only records timed alone (the tuner's picks, no verdicts)
        self.how = "exact"  # how `device` was chosen (for_target): exact / other threads / family
        self.wanted = device
        # workload_key -> the best record timed alone: (mean_cost, id, source rank, config, source)
        self._alone: dict[str, Hit] = {}
        # workload_key -> its records timed in the model: (timestamp, hit)
        self._in_model: dict[str, list[tuple[float, Hit]]] = {}
        self._checked: dict[str, float] = {}  # workload_key -> when its newest in-model check began
        self.sources: list[str] = []

    @classmethod
    def open(
        cls,
        db: str | os.PathLike | bool | None = None,
        logs: str | os.PathLike | bool | None = None,
        device: str = "host",
        target: str | None = None,
        timed_alone: bool = False,
    ) -> Records:
        """Load the best records of ``device`` from the database ``db`` (default:
        :func:`autotune.database.default_path`; a missing file is empty) and the JSON Lines
        logs ``logs`` (a folder of ``<device>.jsonl`` files or one file; default:
        ``./tuning_logs`` if it exists). ``timed_alone``: the best of the records timed alone,
        as the tuner ranks them (the in-model check's candidates)."""
        self = cls(device, target, timed_alone)
        if db is not False:  # False: no database, only the logs
            self.load_db(db_source(db))
        if logs is None and DEFAULT_LOGS.is_dir():
            logs = DEFAULT_LOGS
        if logs is not None and logs is not False:
            logs = Path(logs)
            if logs.is_dir():
                logs = logs / f"{device}.jsonl"
                if logs.exists():
                    self.load_jsonl(logs)
            elif logs.exists():
                self.load_jsonl(logs)
            else:
                raise InputError(f"tuning logs {str(logs)!r}: no such file or folder")
        return self

    @classmethod
    def for_target(
        cls,
        target: Any,
        db: str | os.PathLike | bool | None = None,
        logs: str | os.PathLike | bool | None = None,
        threads: int = 0,
    ) -> Records:
        """The records a compile for `target` uses: among the devices that have records in
        ``db`` and ``logs`` (defaults as :meth:`open`; False: none), the one
        :func:`autotune.device_keys.choose_key` picks for the target's key (exact, other
        thread count, then family; never another architecture). ``.device`` says which,
        ``.how`` how it was chosen ('' and no records when none fits)."""
        from autotune.device_keys import choose_key, device_key, legacy_alias

        want = device_key(target, threads, local_gpu_name(target))
        db_path = None if db is False else db_source(db)
        if logs is False:  # no logs, only the database
            logs_path = None
        else:
            logs_path = Path(logs) if logs is not None else (DEFAULT_LOGS if DEFAULT_LOGS.is_dir() else None)
        stored = stored_devices(db_path, logs_path)
        local = _local_cpu_key()
        alias = {legacy_alias(k, local): k for k in sorted(stored)}  # pre-device-key 'host' records
        key, how = choose_key(alias, want)
        if key is None:
            self = cls(want, target.name)
            self.how, self.wanted = "", want
            return self
        self = cls.open(False if db_path is None else db_path, logs_path or False, device=alias[key])
        self.how, self.wanted = how, want
        return self

    # -- loading -----------------------------------------------------------------------------

    def _offer(
        self,
        key: str,
        timing: object,
        cost: float,
        rid: str,
        rank: int,
        config: object,
        source: str,
        timestamp: float = 0.0,
        checked: float | None = None,
    ) -> None:
        """Offer one record; `checked`: when its source's newest in-model check of the
        workload began (a database's best row says), else found from the records offered."""
        hit = (cost, rid, rank, config, source)
        if timing != "model":
            old = self._alone.get(key)
            if old is None or hit[:3] < old[:3]:
                self._alone[key] = hit
            return
        if self.timed_alone:
            return
        if config in BASELINE_CONFIGS:
            checked = max(timestamp, checked or -math.inf)
        if checked is not None and checked > self._checked.get(key, -math.inf):
            self._checked[key] = checked
        self._in_model.setdefault(key, []).append((timestamp, hit))

    def _hit(self, key: str) -> Hit | None:
        """The best in-model record of the workload's newest check, else its best timed alone."""
        since = self._checked.get(key, -math.inf)
        fresh = [hit for ts, hit in self._in_model.get(key, ()) if ts >= since]
        return min(fresh, key=lambda h: h[:3]) if fresh else self._alone.get(key)

    def load_db(self, path: str | os.PathLike) -> int:
        """Add the database's best rows (read-only; a PostgreSQL URL too). Returns how many
        workloads it had."""
        if isinstance(path, str) and postgres_url(path, "--records") is not None:
            with open_database(path, option="--records") as db:
                rows, name = (
                    db.best_rows(self.device, self.target, self.timed_alone, checked=True),
                    str(db.path),
                )
        else:
            path = Path(path)
            if not path.exists():
                return 0
            rows, name = _sqlite_best_rows(path, self.device, self.target, self.timed_alone), str(path)
        for r in rows:
            config = json.loads(r["config"])
            ts, checked = r.get("timestamp") or 0.0, r.get("_checked")
            self._offer(
                r["workload_key"], r.get("timing"), r["mean_cost"], r["id"], 0, config, "db", ts, checked
            )
        self.sources.append(name)
        return len(rows)

    def load_jsonl(self, path: str | os.PathLike) -> int:
        """Add the records of one JSON Lines log (read once). Returns how many it offered."""
        n_used = 0
        rank = len(self.sources) + 1
        for n, obj in database.read_jsonl(path):
            if obj.get("device") != self.device:  # cheap filter before normalizing
                continue
            if obj.get("error") not in (None, ""):
                continue
            cost = obj.get("mean_cost")
            if _fast_ok(obj, cost):  # an exported line: take its id and mean_cost as they are
                row = obj
            else:  # hand-written / partial: derive id, mean_cost... (and validate)
                row = database.normalize_at(obj, path, n)
                if row["error"] is not None or row["mean_cost"] is None:
                    continue
                cost = row["mean_cost"]
            if row.get("schema_version", database.SCHEMA_VERSION) != database.SCHEMA_VERSION:
                continue
            if self.target is not None and (row.get("target") or "") != self.target:
                continue
            config = obj["config"]
            if isinstance(config, str):
                config = json.loads(config)
            timing = row.get("timing")
            ts = float(row.get("timestamp") or 0.0)
            self._offer(row["workload_key"], timing, float(cost), row["id"], rank, config, str(path), ts)
            n_used += 1
        self.sources.append(str(path))
        return n_used

    # -- lookup ------------------------------------------------------------------------------

    def best(self, workload_key: str) -> dict | None:
        """The config of the lowest-cost successful record of this workload, or None."""
        hit = self._hit(workload_key)
        return hit[3] if hit is not None else None  # type: ignore[return-value]

    def best_cost(self, workload_key: str) -> float:
        """The mean cost (seconds) of :meth:`best`'s record; inf when there is none."""
        hit = self._hit(workload_key)
        return hit[0] if hit is not None else math.inf

    def source_of(self, workload_key: str) -> str | None:
        """Where :meth:`best` came from: ``"db"`` or the JSON Lines file's path."""
        hit = self._hit(workload_key)
        return hit[4] if hit is not None else None

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, workload_key: object) -> bool:
        return workload_key in self._alone or workload_key in self._in_model

    def keys(self) -> list[str]:
        return sorted(self._alone.keys() | self._in_model.keys())

    def __repr__(self) -> str:
        return f"Records(device={self.device!r}, target={self.target!r}, workloads={len(self)})"


def _sqlite_best_rows(path: Path, device: str, target: str | None, timed_alone: bool = False) -> list[dict]:
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise InputError(f"tuning database {str(path)!r}: {e}") from None
    try:
        has = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [database.TABLE]
        ).fetchone()
        return database.best_rows(conn, device, target, timed_alone, checked=True) if has else []
    except sqlite3.DatabaseError as e:
        raise InputError(f"tuning database {str(path)!r}: {e}") from None
    finally:
        conn.close()


def is_log_source(path: Path) -> bool:
    """Whether a records path names JSON Lines logs (a folder of <device>.jsonl, or one .jsonl
    file), not a tuning database."""
    return path.is_dir() or path.suffix == ".jsonl"


def db_source(db: str | os.PathLike | None) -> Path | str:
    """A database spec as :class:`Records` reads it: a PostgreSQL URL as it is, a file path
    as a Path (None: :func:`autotune.database.default_path`)."""
    if db is None:
        return database.default_path()
    url = postgres_url(db, "--records")
    return url if url is not None else Path(db)


def local_gpu_name(target: Any) -> str | None:
    """The name of the local OpenCL device of an OpenCL target's profile (None: a CPU target,
    or no such device here: a compile for a device that is not present)."""
    if target.kind != "opencl":
        return None
    try:
        from tensorir.devices import get_profile, select_device

        return select_device(get_profile(target.profile).platform).name.strip()
    except Exception:  # no pyopencl, no driver, no device: the key's family decides
        return None


def _local_cpu_key() -> str:
    from autotune.device_keys import cpu_key
    from tensorir.target import host_target

    return cpu_key(host_target())


def stored_devices(db: Path | str | None, logs: Path | None) -> set[str]:
    """The device keys that have records in a database (a file, or a PostgreSQL URL) and a
    logs folder or file (None: that source is not read)."""
    return (_db_devices(db) if db else set()) | (_log_devices(logs) if logs is not None else set())


def _db_devices(path: Path | str) -> set[str]:
    if isinstance(path, str):  # a PostgreSQL URL (db_source)
        with open_database(path, option="--records") as db:
            return set(db.devices())
    if not path.exists():
        return set()
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return {r[0] for r in conn.execute(f"SELECT DISTINCT device FROM {database.TABLE}")}
        finally:
            conn.close()
    except sqlite3.Error as e:
        if "no such table" in str(e):
            return set()
        raise InputError(f"tuning database {str(path)!r}: {e}") from None


def _log_devices(path: Path) -> set[str]:
    """Devices of a logs folder (its <device>.jsonl files) or of one .jsonl file (its lines)."""
    if path.is_dir():
        return {p.stem for p in path.glob("*.jsonl")}
    if not path.exists():
        raise InputError(f"tuning logs {str(path)!r}: no such file or folder")
    return {str(obj.get("device")) for _, obj in database.read_jsonl(path) if obj.get("device")}
