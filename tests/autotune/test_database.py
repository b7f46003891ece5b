"""Tuning database: round trip, deterministic export, concurrent writers, crash safety.

The contract tests run on both backends (SQLite and PostgreSQL, the ``backend`` fixture of
tests/autotune/conftest.py)."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import signal

import pytest

from autotune.database import SCHEMA_VERSION, Database, default_path, record_id
from autotune.db_open import open_database


def rec(i: int, wk: str = "conv2d_1x3x8x8", device: str = "cpu-x86", cost: float | None = None, **kw):
    r = {
        "workload_key": wk,
        "device": device,
        "target": "llvm -mcpu=x86-64",
        "config": {"tile": [i % 7 + 1, 4], "unroll": i % 2 == 0, "i": i},
        "costs": [cost if cost is not None else 1e-3 * (1 + i % 13)] * 3,
        "timestamp": 1000.0 + i,
        "host": "testhost",
    }
    r.update(kw)
    return r


def test_default_path_from_config(tmp_path, monkeypatch):
    monkeypatch.setenv("TIR_CACHE_DIR", str(tmp_path / "cache"))
    assert default_path() == tmp_path / "cache" / "tuning.db"
    with Database() as db:
        db.add(rec(1))
        assert len(db) == 1
        assert db.db.journal_mode == "wal"
    assert (tmp_path / "cache" / "tuning.db").exists()


def test_round_trip_best_export_import(tmp_path, backend):
    db = backend.open("a")
    for i in range(20):
        db.add(rec(i, wk=f"w{i % 3}", device="cpu" if i % 2 else "gpu"))
    db.add(rec(0, wk="w0", device="gpu", cost=5.0))  # re-measurement replaces (same id)
    assert len(db) == 20
    best = db.best("w1", "cpu")
    cands = [r for r in db.records("cpu") if r["workload_key"] == "w1"]
    assert best == min(cands, key=lambda r: (r["mean_cost"], r["id"]))
    assert best["schema_version"] == SCHEMA_VERSION
    assert best["config"]["i"] % 3 == 1 and isinstance(best["costs"], list)
    assert best["id"] == record_id("w1", "cpu", best["target"], SCHEMA_VERSION, best["config"])
    assert db.best("nope", "cpu") is None

    out1, out2 = tmp_path / "logs" / "all.jsonl", tmp_path / "logs" / "again.jsonl"
    assert db.export_jsonl(out1) == 20
    db.export_jsonl(out2)
    assert out1.read_bytes() == out2.read_bytes()  # deterministic
    lines = out1.read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    keys = [(r["workload_key"], r["device"], r["id"]) for r in rows]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert all(line == json.dumps(json.loads(line), sort_keys=True, separators=(",", ":")) for line in lines)
    assert db.export_jsonl(tmp_path / "cpu.jsonl", device="cpu") == 10

    db2 = backend.open("b")
    assert db2.import_jsonl(out1) == 20
    assert db2.records() == db.records()
    assert db2.best("w1", "cpu") == best
    # importing again (and merging overlapping files) de-duplicates by id
    db2.merge([out1, tmp_path / "cpu.jsonl"])
    assert len(db2) == 20
    db2.export_jsonl(tmp_path / "b.jsonl")
    assert (tmp_path / "b.jsonl").read_bytes() == out1.read_bytes()


def test_errors_recorded_and_excluded_from_best(tmp_path, backend):
    db = backend.open("e")
    db.add(rec(1, cost=2e-3))
    db.add(rec(2, costs=[], error="build timeout after 10 s"))
    db.add(rec(3, costs=[math.inf], mean_cost=math.inf, error="RuntimeError: segfault in kernel"))
    db.add(rec(4, costs=[math.inf]))  # non-finite measurement without a reason is an error too
    errs = {r["config"]["i"]: r for r in db.records() if r["error"]}
    assert errs[2]["error"] == "build timeout after 10 s"
    assert errs[3]["error"].startswith("RuntimeError") and errs[3]["mean_cost"] == math.inf
    assert set(errs) == {2, 3, 4}
    assert db.best("conv2d_1x3x8x8", "cpu-x86")["config"]["i"] == 1
    assert db.stats() == {"count": 4, "errors": 3, "devices": {"cpu-x86": {"count": 4, "errors": 3}}}
    # exported files are strict JSON (no Infinity) and come back unchanged
    db.export_jsonl(tmp_path / "e.jsonl")
    assert "Infinity" not in (tmp_path / "e.jsonl").read_text()
    db2 = backend.open("e2")
    db2.import_jsonl(tmp_path / "e.jsonl")
    assert db2.records() == db.records()
    # only errors -> no best
    db.add(rec(5, wk="bad", error="compile error"))
    assert db.best("bad", "cpu-x86") is None


def test_prune_and_stats(backend):
    db = backend.open("p")
    for i in range(30):
        db.add(rec(i, wk=f"w{i % 2}", cost=float(i + 1)))
    db.add(rec(100, error="x"))
    db.add(rec(5, device="other"))
    assert db.stats()["devices"]["cpu-x86"] == {"count": 31, "errors": 1}
    assert db.prune("cpu-x86", keep_top=3) == 25
    left = db.records("cpu-x86")
    assert sorted(r["mean_cost"] for r in left if r["workload_key"] == "w0") == [1.0, 3.0, 5.0]
    assert sorted(r["mean_cost"] for r in left if r["workload_key"] == "w1") == [2.0, 4.0, 6.0]
    assert len(db.records("other")) == 1 and db.stats()["count"] == 7
    assert db.prune("cpu-x86", keep_top=None) == 0  # no errors left
    db.add(rec(101, wk="w0", error="y"))
    assert db.prune("cpu-x86", keep_top=1, drop_errors=False) == 4
    assert db.record_counts("cpu-x86") == {("w0", "cpu-x86"): 2, ("w1", "cpu-x86"): 1}
    assert db.workload_count() == 3 and db.workload_count("other") == 1
    assert db.devices() == ["cpu-x86", "other"] and db.size_bytes() > 0
    assert db.rename_device("other", "renamed") == 1 and db.devices() == ["cpu-x86", "renamed"]


def test_local_files_of_a_database(backend, tmp_path, monkeypatch):
    """The tuner's cost model goes beside a database file; a server's in the user cache."""
    monkeypatch.setenv("TIR_CACHE_DIR", str(tmp_path / "cache"))
    with backend.open("m") as db:
        path = db.local_file("costmodel-cpu.json")
    if backend.kind == "sqlite":
        assert path == tmp_path / "costmodel-cpu.json"
    else:
        port, name = backend.server.port, backend.spec("m").rsplit("/", 1)[1]
        assert path == tmp_path / "cache" / "postgres" / f"127.0.0.1-{port}-{name}" / "costmodel-cpu.json"


def _writer(spec: str, tag: str, n: int) -> None:
    db = open_database(spec)
    for i in range(n):
        db.add(rec(i, wk=f"wk-{tag}-{i % 5}"))
    db.close()


def test_processes_write_concurrently(backend):
    """Four writer processes (two of them writing the same records): each record once."""
    spec = backend.spec("c")
    backend.open("c").close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(spec, tag, 150)) for tag in ("a", "b", "c", "c")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = open_database(spec)
    assert len(db) == 450 and len({r["id"] for r in db.records()}) == 450
    assert db.record_counts() == {(f"wk-{t}-{k}", "cpu-x86"): 30 for t in "abc" for k in range(5)}
    if backend.kind == "sqlite":
        assert db.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _crasher(spec: str, conn) -> None:
    db = open_database(spec)
    for i in range(1_000_000):
        db.add(rec(i))
        conn.send(i)  # reported only after the commit returned


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_mid_run_keeps_finished_records(backend):
    path = backend.spec("k")
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_crasher, args=(path, send))
    p.start()
    send.close()
    done = []
    while len(done) < 150:
        assert recv.poll(30), "child stopped reporting"
        done.append(recv.recv())
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)
    assert p.exitcode == -signal.SIGKILL
    try:
        while recv.poll(0.2):
            done.append(recv.recv())
    except EOFError:
        pass
    assert done == list(range(len(done)))

    db = open_database(path)  # reopens after the crash (SQLite: WAL recovery)
    if backend.kind == "sqlite":
        assert db.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    have = {r["config"]["i"] for r in db.records()}
    assert set(done) <= have  # every finished record survived
    assert len(have) <= len(done) + 1  # at most the one committed but not yet reported
    # resume: keep adding
    for i in range(10_000, 10_020):
        db.add(rec(i))
    assert len(db) == len(have) + 20
    assert db.best("conv2d_1x3x8x8", "cpu-x86") is not None


def test_records_say_how_they_were_timed_and_in_model_records_win(tmp_path, backend):
    """A record timed inside the model outranks records timed alone, whatever their costs;
    it lives beside the alone record of the same config (its id includes the timing)."""
    from autotune.records import Records

    path = backend.spec("t")
    db = open_database(path)
    db.add(rec(1, wk="w", cost=1e-3, timing="cold"))
    db.add(rec(2, wk="w", cost=2e-3, timing="warm"))
    assert db.best("w", "cpu-x86")["config"]["i"] == 1
    db.add(rec(2, wk="w", cost=3e-3, timing="model"))  # config 2, timed in the model
    db.add(rec(3, wk="w", cost=4e-3, timing="model"))
    assert len(db) == 4  # config 2 alone and config 2 in the model are two records
    best = db.best("w", "cpu-x86")
    assert (best["config"]["i"], best["timing"]) == (2, "model")
    assert [r["config"]["i"] for r in db.best_records("cpu-x86")] == [2]
    assert Records.open(path, False, device="cpu-x86").best("w")["i"] == 2
    log = tmp_path / "cpu-x86.jsonl"
    db.export_jsonl(log)
    assert Records.open(False, log, device="cpu-x86").best("w")["i"] == 2
    assert {json.loads(x).get("timing") for x in log.read_text().splitlines()} == {"cold", "warm", "model"}
    with pytest.raises(ValueError, match="'timing' must be one of"):
        db.add(rec(4, wk="w", timing="hot"))


def test_only_the_newest_in_model_check_speaks_for_a_workload(tmp_path, backend):
    """In-model verdicts older than the workload's newest baseline (the defaults {} of a
    kernel, {"kernel_records": False} of a model) come from an earlier check, other code and
    another day's machine: they never outrank the newest check's, however cheap."""
    from autotune.records import Records

    path = backend.spec("t")
    db = open_database(path)

    def verdict(i, config, cost, when):
        db.add(rec(i, wk="w", cost=cost, timing="model", config=config, timestamp=when))

    db.add(rec(9, wk="w", cost=1e-3, timing="cold"))  # timed alone: never above a verdict
    verdict(0, {}, 5e-3, 1000.0)  # check 1: config A won in the model
    verdict(1, {"a": 1}, 3e-3, 1000.0)
    assert db.best("w", "cpu-x86")["config"] == {"a": 1}
    verdict(0, {}, 4e-3, 2000.0)  # check 2 re-times the defaults beside config B: they win
    verdict(2, {"b": 2}, 4.5e-3, 2000.0)
    assert db.best("w", "cpu-x86")["config"] == {}
    assert [r["config"] for r in db.best_records("cpu-x86")] == [{}]
    assert Records.open(path, False, device="cpu-x86").best("w") == {}
    log = tmp_path / "best.jsonl"
    db.export_jsonl(log, best_only=True)
    assert [json.loads(x)["config"] for x in log.read_text().splitlines()] == [{}]
    db.export_jsonl(log)  # every record: the reader ranks them alike
    assert Records.open(False, log, device="cpu-x86").best("w") == {}
    verdict(0, {}, 6e-3, 3000.0)  # check 3 times config A again: it wins again
    verdict(1, {"a": 1}, 5e-3, 3000.0)
    assert db.best("w", "cpu-x86")["config"] == {"a": 1}
    for i, config, when in ((3, {"kernel_records": False}, 1000.0), (4, {"kernel_records": True}, 1000.0)):
        db.add(
            rec(
                i, wk="model #m", cost=9e-3 if i == 4 else 1e-2, timing="model", config=config, timestamp=when
            )
        )
    assert db.best("model #m", "cpu-x86")["config"] == {"kernel_records": True}
    db.add(
        rec(3, wk="model #m", cost=2e-2, timing="model", config={"kernel_records": False}, timestamp=2000.0)
    )
    assert db.best("model #m", "cpu-x86")["config"] == {"kernel_records": False}  # the records lost since
    db.close()


def test_prune_keeps_the_newest_in_model_check_before_an_older_one(backend):
    """prune ranks as readers do: an older check's cheap verdict goes before the newest
    check's records and the records timed alone."""
    db = backend.open("pf")
    db.add(rec(0, wk="w", cost=5e-3, timing="model", config={}, timestamp=1000.0))
    db.add(rec(1, wk="w", cost=3e-3, timing="model", config={"a": 1}, timestamp=1000.0))
    db.add(rec(0, wk="w", cost=4e-3, timing="model", config={}, timestamp=2000.0))
    db.add(rec(2, wk="w", cost=1e-3, timing="cold", config={"b": 2}))
    assert db.prune("cpu-x86", keep_top=2) == 1
    assert sorted(str(r["config"]) for r in db.records("cpu-x86")) == ["{'b': 2}", "{}"]
    assert db.best("w", "cpu-x86")["config"] == {}
    db.close()


def test_a_database_from_before_the_timing_column(tmp_path):
    """Old files are read as they are (read-only lookups) and gain the column when opened
    for writing; their records say nothing of timing, and their exported lines are unchanged."""
    import sqlite3

    from autotune.database import COLUMNS, TABLE, normalize
    from autotune.records import Records

    path = tmp_path / "old.db"
    old = [c for c in COLUMNS if c != "timing"]
    conn = sqlite3.connect(path)
    columns = ", ".join(c + (" PRIMARY KEY" if c == "id" else "") for c in old)
    conn.execute(f"CREATE TABLE {TABLE} ({columns})")
    row = normalize(rec(1, wk="w"))
    conn.execute(f"INSERT INTO {TABLE} VALUES ({','.join('?' * len(old))})", [row[c] for c in old])
    conn.commit()
    conn.close()
    assert Records.open(path, False, device="cpu-x86").best("w")["i"] == 1
    db = Database(path)
    assert db.best("w", "cpu-x86")["timing"] is None
    db.add(rec(2, wk="w", cost=9.0, timing="model"))
    assert db.best("w", "cpu-x86")["config"]["i"] == 2
    db.export_jsonl(tmp_path / "x.jsonl", device="cpu-x86")
    lines = [json.loads(x) for x in (tmp_path / "x.jsonl").read_text().splitlines()]
    assert ["timing" in x for x in sorted(lines, key=lambda x: x["config"]["i"])] == [False, True]
