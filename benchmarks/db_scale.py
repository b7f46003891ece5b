"""Tuning-database throughput: SQLite beside PostgreSQL, with 1, 2, 4, 8 writer processes.

    python -m benchmarks.db_scale [--seconds 3] [--writers 1,2,4,8] [--pg-sync on|off]

For each backend and each process count N, N processes (started first, released together
by a barrier) each for ``--seconds``:

- insert: ``db.add(record)`` in a loop, one committed transaction per record, as a tuner
  writes its measurements (records/s, all processes together);
- best: ``db.best(workload, device)`` for random workloads of a database holding
  ``--records`` records (what the tuner asks when it resumes; queries/s, all together);
- compile: ``db.best_records(device)``, the one query `tir compile` makes (queries/s).

SQLite is a file in a temporary folder (WAL, synchronous=NORMAL: autotune/database.py's
settings). PostgreSQL is a server this script starts and stops itself, as the tests do
(tests/pg_server.py), with its durable defaults (fsync on, synchronous_commit on) unless
``--pg-sync off`` (synchronous_commit off: a commit does not wait for its WAL flush; the
durability SQLite's NORMAL gives). Every client connects over loopback TCP.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEVICE = "x86_64-bench"
WORKLOADS = 200


def _record(writer: int, n: int) -> dict:
    return {
        "workload_key": f"conv2d_w{(writer * 7919 + n) % WORKLOADS}",
        "device": DEVICE,
        "target": "llvm",
        "config": {"tile": [n % 16 + 1, 4], "unroll": n % 3, "writer": writer, "n": n},
        "costs": [1e-4 * (1 + (n * 31 + writer) % 97)] * 3,
        "timestamp": 1.0e9 + n,
        "host": f"bench-{writer}",
    }


def _worker(spec: str, mode: str, writer: int, seconds: float, barrier: Any, out: Any) -> None:
    from autotune.db_open import open_database

    with open_database(spec) as db:
        rng = random.Random(writer)
        barrier.wait(120)
        t0 = time.perf_counter()
        end, n = t0 + seconds, 0
        while time.perf_counter() < end:
            if mode == "insert":
                db.add(_record(writer, n))
            elif mode == "best":
                db.best(f"conv2d_w{rng.randrange(WORKLOADS)}", DEVICE)
            else:
                db.best_records(DEVICE)
            n += 1
        out.put(n / (time.perf_counter() - t0))


def rate(spec: str, mode: str, processes: int, seconds: float) -> float:
    """Operations per second of ``processes`` processes together doing ``mode`` on ``spec``."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(processes), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(spec, mode, w, seconds, barrier, out)) for w in range(processes)
    ]
    for p in procs:
        p.start()
    rates = [out.get(timeout=seconds + 180) for _ in procs]
    for p in procs:
        p.join(60)
        if p.exitcode != 0:
            raise RuntimeError(f"a {mode} worker failed (exit {p.exitcode})")
    return sum(rates)


def fill(spec: str, records: int) -> None:
    """``records`` records over WORKLOADS workloads, in batches of one transaction each."""
    from autotune.db_open import open_database

    with open_database(spec) as db:
        for start in range(0, records, 1000):
            db.add_many(_record(1000 + start // 1000, n) for n in range(start, min(records, start + 1000)))


def measure(name: str, new_spec: Any, writers: list[int], seconds: float, records: int) -> list[list[str]]:
    """Table rows for one backend; ``new_spec()`` gives a new, empty database."""
    queried = new_spec()
    fill(queried, records)
    rows = []
    for n in writers:
        inserts = rate(new_spec(), "insert", n, seconds)
        best = rate(queried, "best", n, seconds)
        compile_ = rate(queried, "compile", n, seconds)
        rows.append([name, str(n), f"{inserts:,.0f}", f"{best:,.0f}", f"{compile_:,.1f}"])
        print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per measurement (default 3)")
    ap.add_argument("--writers", default="1,2,4,8", help="process counts (default 1,2,4,8)")
    ap.add_argument("--records", type=int, default=20000, help="records in the queried database")
    ap.add_argument("--pg-sync", choices=["on", "off"], default="on", help="PostgreSQL synchronous_commit")
    args = ap.parse_args(argv)
    writers = [int(w) for w in args.writers.split(",")]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.pg_server import PgServer

    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="tir-db-scale-") as tmp:
        files = iter(range(1_000_000))
        rows += measure("sqlite", lambda: f"{tmp}/{next(files)}.db", writers, args.seconds, args.records)
        with PgServer.start(fast=False) as server:
            if args.pg_sync == "off":
                import psycopg

                with psycopg.connect(server.url(), autocommit=True) as conn:
                    conn.execute("ALTER SYSTEM SET synchronous_commit = off")
                    conn.execute("SELECT pg_reload_conf()")
            name = f"postgresql (synchronous_commit {args.pg_sync})"
            rows += measure(name, server.create_database, writers, args.seconds, args.records)
    header = ["backend", "processes", "insert records/s", "best() queries/s", "best_records() queries/s"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        print("  ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
