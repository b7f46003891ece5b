"""This machine's fp32 peak: a register-only FMA kernel generated through tensorir's codegen
(`autotune.idle.peak_func`, which a tuning run also uses to ask whether the cores are idle).

    python -m benchmarks.peak                 # 1 and 2 threads
    python -m benchmarks.peak --threads 1 2 4 --iters 2000000

The kernel is a LoopFunc: per PARALLEL task, R independent <L x float> accumulators
(L = vector_lanes("float32"), R = num_vector_registers - 8, at most 24, at least 8 so that
the FMA latency (4 cycles on 2 ports) is covered) live in a local buffer that LLVM promotes
to registers; a long SERIAL loop updates each with acc = fma(acc, a, b) (a, b broadcast
from a 2-element input, loaded once), then the accumulators are stored so nothing is dead.
The accumulator updates are unrolled in Python (constant indices), so no memory traffic
is left in the loop: R FMAs + a counter increment and a branch per iteration.

FLOPs = tasks * iters * R * L * 2. With 2 threads the PARALLEL loop has 2 tasks (one per
thread). Reported: best of --runs runs (peak means the best the core can do; the median is
in the JSON too). Results: stdout and benchmarks/results/peak.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from autotune.idle import fma_loop, lanes_accumulators
from tensorir.target import get_target

RESULTS = Path(__file__).parent / "results"


def measure(threads: int, iters: int, runs: int) -> dict:
    target = get_target("host")
    lanes, accs = lanes_accumulators(target)
    run, flops = fma_loop(threads, iters)
    run()  # warm up: wakes the pool, faults the output in
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    best, med = min(times), float(np.median(times))
    return {
        "threads": threads,
        "lanes": lanes,
        "accumulators": accs,
        "iters": iters,
        "flops": flops,
        "best_s": best,
        "median_s": med,
        "gflops": flops / best / 1e9,
        "gflops_median": flops / med / 1e9,
        "cpu": target.cpu,
    }


def load_peak(threads: int = 1, path: Path | str = RESULTS / "peak.json") -> float | None:
    """The measured GFLOP/s for `threads` threads from peak.json (None if not measured)."""
    p = Path(path)
    if not p.exists():
        return None
    for r in json.loads(p.read_text()):
        if r["threads"] == threads:
            return float(r["gflops"])
    return None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--iters", type=int, default=4_000_000)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--out", default=str(RESULTS / "peak.json"))
    args = p.parse_args(argv)
    rows = []
    print(f"{'thr':>3} {'lanes':>5} {'accs':>4} {'best GFLOP/s':>13} {'median GFLOP/s':>15} {'s/run':>8}")
    for n in args.threads:
        r = measure(n, args.iters, args.runs)
        rows.append(r)
        print(
            f"{n:>3} {r['lanes']:>5} {r['accumulators']:>4} {r['gflops']:>13.1f} "
            f"{r['gflops_median']:>15.1f} {r['best_s']:>8.3f}"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
