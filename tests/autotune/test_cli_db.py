"""`tir db`: export / import / merge / top / prune / stats and their bad-input handling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.database import Database
from tensorir.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def rec(wk: str, i: int, cost: float | None, device: str = "cpu", **kw) -> dict:
    r = {
        "workload_key": wk,
        "device": device,
        "target": "llvm",
        "config": {"tile": [i, 4], "i": i},
        "costs": [cost] * 3 if cost is not None else [],
        "timestamp": 1000.0 + i,
        "host": "h",
        "tensorir_version": "0.1.0",
    }
    r.update(kw)
    return r


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)


def fill(path: str | Path) -> str:
    """A SQLite tuning database at ``path`` with 14 records (11 on device cpu, one an error;
    3 on gpu) of 4 workloads."""
    with Database(path) as db:
        for i in range(12):
            db.add(rec(f"conv_w{i % 3}", i, 1e-3 * (i + 1), device="cpu" if i % 4 else "gpu"))
        db.add(rec("conv_w0", 50, None, error="build timeout"))
        db.add(rec("matmul_64", 60, 2e-3, config={"tile": [8], "flops": 2 * 64**3}))
    return str(path)


@pytest.fixture
def db_path(tmp_path) -> str:
    return fill(tmp_path / "t.db")


def tir(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err.strip()


def lines_of(path) -> list[dict]:
    return [json.loads(x) for x in Path(path).read_text().splitlines()]


def test_db_is_registered():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert "db" in sub.choices and {"inspect", "compile", "run"} <= set(sub.choices)


def test_export_import_round_trip(db_path, tmp_path, capsys):
    rc, out, _ = tir(["db", "export", "--db", db_path, "--out", "logs"], capsys)
    assert rc == 0
    assert out.splitlines() == [
        "wrote 11 records to logs/cpu.jsonl",
        "wrote 3 records to logs/gpu.jsonl",
        "14 records in 2 files",
    ]
    cpu = (tmp_path / "logs" / "cpu.jsonl").read_bytes()
    rows = lines_of(tmp_path / "logs" / "cpu.jsonl")
    keys = [(r["workload_key"], r["device"], r["id"]) for r in rows]
    assert keys == sorted(keys) and len(set(keys)) == len(keys) and {r["device"] for r in rows} == {"cpu"}
    assert all(list(r) == sorted(r) for r in rows)

    rc, out, _ = tir(["db", "import", "logs/cpu.jsonl", "logs/gpu.jsonl", "--db", "b.db"], capsys)
    assert rc == 0
    assert "logs/cpu.jsonl: 11 new, 0 replaced, 0 skipped" in out
    assert "total: 14 new, 0 replaced, 0 skipped" in out
    with Database(db_path) as a, Database(tmp_path / "b.db") as b:
        assert a.records() == b.records()  # lossless
    rc, out, _ = tir(["db", "export", "--db", "b.db", "--out", "again", "--device", "cpu"], capsys)
    assert rc == 0 and out.strip() == "wrote 11 records to again/cpu.jsonl"
    assert (tmp_path / "again" / "cpu.jsonl").read_bytes() == cpu  # byte-identical

    # importing again skips everything; a changed record counts as replaced
    changed = lines_of(tmp_path / "logs" / "gpu.jsonl")
    changed[0]["costs"] = [9.0] * 3
    changed[0]["mean_cost"] = 9.0
    (tmp_path / "g2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in changed))
    rc, out, _ = tir(["db", "import", "g2.jsonl", "--db", "b.db"], capsys)
    assert "g2.jsonl: 0 new, 1 replaced, 2 skipped" in out


def test_export_best_only(db_path, tmp_path, capsys):
    rc, out, _ = tir(["db", "export", "--db", db_path, "--best-only", "--device", "cpu"], capsys)
    assert rc == 0 and out.strip() == "wrote 4 records to tuning_logs/cpu.jsonl"
    rows = lines_of(tmp_path / "tuning_logs" / "cpu.jsonl")
    assert [(r["workload_key"], r["config"].get("i")) for r in rows] == [
        ("conv_w0", 3),
        ("conv_w1", 1),
        ("conv_w2", 2),
        ("matmul_64", None),
    ]


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_merge_sorted_deduplicated_idempotent(tmp_path, capsys):
    a = [rec("w1", 1, 1.0), rec("w0", 2, 2.0), rec("w2", 3, 3.0)]
    b = [rec("w0", 2, 2.0), rec("w1", 4, 0.5), rec("w2", 3, 2.5, timestamp=5000.0)]  # w2/3: newer
    _write(tmp_path / "a.jsonl", a)
    _write(tmp_path / "b.jsonl", b + b[:1])  # duplicates within one file too
    rc, out, _ = tir(["db", "merge", "a.jsonl", "b.jsonl", "-o", "m.jsonl"], capsys)
    assert rc == 0 and out.strip() == "merged 2 files (7 lines) into m.jsonl: 4 records"
    rows = lines_of(tmp_path / "m.jsonl")
    assert [r["workload_key"] for r in rows] == ["w0", "w1", "w1", "w2"]
    assert sorted(r["config"]["i"] for r in rows) == [1, 2, 3, 4]
    keys = [(r["workload_key"], r["device"], r["id"]) for r in rows]
    assert keys == sorted(keys) and len(set(keys)) == 4
    assert next(r for r in rows if r["workload_key"] == "w2")["mean_cost"] == 2.5  # later one wins
    merged = (tmp_path / "m.jsonl").read_bytes()

    # order independent and idempotent (merging the result with an input changes nothing)
    for argv in (["b.jsonl", "a.jsonl"], ["m.jsonl", "b.jsonl"], ["a.jsonl", "m.jsonl"], ["m.jsonl"]):
        assert tir(["db", "merge", *argv, "-o", "again.jsonl"], capsys)[0] == 0
        assert (tmp_path / "again.jsonl").read_bytes() == merged, argv
    # in place, as a git merge driver does (-o %A)
    assert tir(["db", "merge", "m.jsonl", "a.jsonl", "-o", "m.jsonl"], capsys)[0] == 0
    assert (tmp_path / "m.jsonl").read_bytes() == merged
    # the merged file is exactly what exporting its import gives
    assert tir(["db", "import", "m.jsonl", "--db", "m.db"], capsys)[0] == 0
    assert tir(["db", "export", "--db", "m.db", "--out", "exp"], capsys)[0] == 0
    assert (tmp_path / "exp" / "cpu.jsonl").read_bytes() == merged


def test_merge_three_way_keeps_deletions(tmp_path, capsys):
    base = [rec("w", 1, 1.0), rec("w", 2, 2.0), rec("w", 3, 3.0)]
    ours = [*base[:2], rec("w", 4, 0.5)]  # we pruned 3 and added 4
    theirs = [*base, rec("w", 5, 0.7)]  # they added 5
    for name, rows in (("o", base), ("a", ours), ("b", theirs)):
        _write(tmp_path / f"{name}.jsonl", rows)
    argv = ["db", "merge", "--base", "o.jsonl", "a.jsonl", "b.jsonl", "-o", "a.jsonl"]
    assert tir(argv, capsys)[0] == 0
    assert sorted(r["config"]["i"] for r in lines_of(tmp_path / "a.jsonl")) == [1, 2, 4, 5]


def test_top(db_path, capsys):
    rc, out, _ = tir(["db", "top", "--db", db_path], capsys)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == ["workload", "device", "best", "ms", "GFLOP/s", "config", "records"]
    assert len(lines) == 1 + 7  # 4 cpu workloads + 3 gpu ones
    rows = {tuple(x.split()[:2]): x.split() for x in lines[1:]}
    ms = [x.split()[2] for x in lines[1:]]
    assert ms == ["9.000", "5.000", "4.000", "3.000", "2.000", "2.000", "1.000"]  # slowest first
    assert lines[1].split()[:2] == ["conv_w2", "gpu"]  # slowest first
    w0 = rows["conv_w0", "cpu"]  # best 4 ms; the error record counts among the records only
    assert w0[2] == "4.000" and w0[-1] == "4"
    mm = rows["matmul_64", "cpu"]
    assert mm[:4] == ["matmul_64", "cpu", "2.000", f"{2 * 64**3 / 2e-3 / 1e9:.1f}"]
    assert "tile=[8]" in mm and "flops" not in " ".join(mm) and mm[-1] == "1"
    w1 = rows["conv_w1", "cpu"]
    assert w1[2:] == ["2.000", "i=1", "tile=[1,4]", "3"]  # no flops: blank GFLOP/s

    rc, out, _ = tir(["db", "top", "--db", db_path, "--device", "gpu", "--workload", "w", "-n", "1"], capsys)
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 3 and lines[1].split()[:3] == ["conv_w2", "gpu", "9.000"]
    assert lines[2] == "(1 of 3 workloads; -n 0 shows all)"
    rc, out, _ = tir(["db", "top", "--db", db_path, "--workload", "nothing"], capsys)
    assert rc == 0 and out.strip() == "no successful records matching 'nothing'"


def test_prune(db_path, capsys):
    rc, out, _ = tir(["db", "prune", "--db", db_path, "--device", "cpu", "--keep", "1"], capsys)
    assert rc == 0 and out.splitlines()[0] == "cpu: deleted 6 records"  # 3 conv workloads x 3 -> 1 each
    with Database(db_path) as db:
        assert db.stats()["devices"]["cpu"] == {"count": 5, "errors": 1}  # errors kept without --errors
    rc, out, _ = tir(["db", "prune", "--db", db_path, "--errors"], capsys)
    assert rc == 0 and out.splitlines() == [
        "cpu: deleted 1 records",
        "gpu: deleted 0 records",
        f"deleted 1 records, 7 left in {db_path}",
    ]


def test_stats(db_path, capsys):
    rc, out, _ = tir(["db", "stats", "--db", db_path], capsys)
    assert rc == 0
    got = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert got["database"][0] == db_path and got["database"][-1] in ("KiB)", "MiB)")
    assert got["records"] == ["14"] and got["workloads"] == ["4"] and got["devices"] == ["2"]
    assert got["errors"] == ["1"]
    assert got["cpu"] == ["11", "records,", "4", "workloads,", "1", "errors"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["db", "import", "missing.jsonl"], ["missing.jsonl", "no such file"]),
        (["db", "import", "bad.jsonl"], ["bad.jsonl:2:", "not a JSON record"]),
        (["db", "import", "norec.jsonl"], ["norec.jsonl:1:", "workload_key"]),
        (["db", "merge", "a.jsonl", "bad.jsonl", "-o", "m.jsonl"], ["bad.jsonl:2:"]),
        (["db", "export", "--db", "DB", "--device", "tpu"], ["--device 'tpu'", "cpu, gpu"]),
        (["db", "top", "--db", "nope.db"], ["--db nope.db", "no such file"]),
        (["db", "stats", "--db", "junk.db"], ["junk.db", "not a tuning database"]),
        (["db", "prune", "--db", "DB"], ["--keep N and/or --errors"]),
        (["db", "prune", "--db", "DB", "--keep", "0"], ["--keep 0"]),
        (["db", "stats"], ["tuning.db", "no such file"]),  # default database not there yet
    ],
)
def test_bad_input_is_one_line_exit_2(argv, words, db_path, tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text(json.dumps(rec("w", 1, 1.0)) + "\n")
    (tmp_path / "bad.jsonl").write_text(json.dumps(rec("w", 1, 1.0)) + "\n{oops\n")
    (tmp_path / "norec.jsonl").write_text('{"device": "cpu", "config": {}}\n')
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 50)
    argv = [db_path if a == "DB" else a for a in argv]
    rc, _out, err = tir(argv, capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("tir db: error: ")
    for w in words:
        assert w in err, (w, err)
    assert not (tmp_path / "m.jsonl").exists()


def test_bad_input_subprocess(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"workload_key": "w"}\n[1, 2\n')
    env = {**os.environ, "TIR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    env.pop("TIR_DEBUG", None)
    p = subprocess.run(
        [sys.executable, "-m", "tensorir.cli", "db", "import", "bad.jsonl"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "Traceback" not in p.stderr
    assert "bad.jsonl:1: bad tuning record" in p.stderr
    assert not (tmp_path / "cache" / "tuning.db").exists()  # nothing written on bad input
