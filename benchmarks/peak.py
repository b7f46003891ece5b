"""This machine's fp32 peak: a register-only FMA kernel generated through tensorir's codegen.

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

from tensorir.loop.ir import (
    Allocate,
    Broadcast,
    Buffer,
    Call,
    Const,
    For,
    ForKind,
    Load,
    LoopFunc,
    Ramp,
    Seq,
    Store,
    Var,
)
from tensorir.target import get_target

RESULTS = Path(__file__).parent / "results"


def _vec(base, lanes: int) -> Ramp:
    return Ramp(base, Const(1), lanes)


def peak_func(tasks: int, iters: int, lanes: int, accs: int) -> LoopFunc:
    """for t in parallel(tasks): acc[R][L]; for it in range(iters): acc[r] = fma(acc[r], a, b)."""
    X = Buffer("X", (2,))
    O = Buffer("O", (tasks * accs * lanes,))
    acc = Buffer("acc", (accs * lanes,), scope="local")
    t, it = Var("t"), Var("it")
    a = Broadcast(Load(X, Const(0)), lanes)
    b = Broadcast(Load(X, Const(1)), lanes)
    init = Seq(
        tuple(
            Store(acc, _vec(Const(r * lanes), lanes), Broadcast(Const(float(r), "float32"), lanes))
            for r in range(accs)
        )
    )
    update = Seq(
        tuple(
            Store(
                acc,
                _vec(Const(r * lanes), lanes),
                Call("fma", (Load(acc, _vec(Const(r * lanes), lanes)), a, b)),
            )
            for r in range(accs)
        )
    )
    loop = For(it, Const(0), Const(iters), ForKind.SERIAL, update)
    out = Seq(
        tuple(
            Store(O, _vec(t * (accs * lanes) + r * lanes, lanes), Load(acc, _vec(Const(r * lanes), lanes)))
            for r in range(accs)
        )
    )
    body = For(t, Const(0), Const(tasks), ForKind.PARALLEL, Allocate(acc, Seq((init, loop, out))))
    return LoopFunc(f"peak_fma_{tasks}x{accs}x{lanes}", (X, O), body)


def fma_loop(threads: int, iters: int):
    """The host's peak kernel, `threads` tasks of `iters` iterations, bound and ready to call
    on the JIT's pool set to `threads`; and its FLOPs per call."""
    from tensorir.runtime.jit import compile_host, set_num_threads

    lanes, accs = _lanes_accumulators(get_target("host"))
    kernel = compile_host(peak_func(threads, iters, lanes, accs))
    set_num_threads(threads)
    x = np.array([0.999999, 1e-7], np.float32)
    o = np.zeros(threads * accs * lanes, np.float32)
    return kernel.bind(x, o), 2.0 * threads * iters * accs * lanes


def _lanes_accumulators(target) -> tuple[int, int]:
    """float32 lanes per vector, and the accumulators: every register but 8, 8 to 24."""
    return target.vector_lanes("float32"), max(8, min(24, target.num_vector_registers - 8))


def measure(threads: int, iters: int, runs: int) -> dict:
    target = get_target("host")
    lanes, accs = _lanes_accumulators(target)
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
