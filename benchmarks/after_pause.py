"""One build, runs back to back against the first runs after a pause, per thread count: what
an app that runs a model now and then (a camera frame, a key press) sees beside what a loop of
runs sees. `benchmarks.compare` starts each block of runs after a 50 ms pause (so the other
engine's threads go to sleep) and then runs untimed for 10 ms, so its figures are the
back-to-back ones.

    python -m benchmarks.after_pause mobilenet_v2_96 --threads 1 2 --rounds 10 --pause-ms 50

Per round: 10 untimed runs, 10 timed back to back, the pause, then 6 timed runs; printed are
the medians over the rounds of the back-to-back runs and of each run after the pause.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np


def after_pause(
    run: Callable[[], object], rounds: int, pause_s: float, after: int = 6
) -> tuple[float, list[float]]:
    """(median seconds back to back, median seconds of the k-th run after the pause per k)."""
    hot: list[float] = []
    runs: list[list[float]] = [[] for _ in range(after)]
    for _ in range(rounds):
        for _ in range(10):
            run()
        for _ in range(10):
            t0 = time.perf_counter()
            run()
            hot.append(time.perf_counter() - t0)
        time.sleep(pause_s)
        for k in range(after):
            t0 = time.perf_counter()
            run()
            runs[k].append(time.perf_counter() - t0)
    return float(np.median(hot)), [float(np.median(r)) for r in runs]


def main(argv: list[str] | None = None) -> None:
    import tensorir as tir
    from benchmarks.fuse_ab import _feeds, _model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--pause-ms", type=float, default=50.0)
    args = p.parse_args(argv)
    print(f"{'model':<20} {'thr':>3} {'back to back':>12}  runs 1.. after a {args.pause_ms:g} ms pause (ms)")
    for name in args.models:
        model = _model(name)
        mod = tir.compile(model)
        run = mod.bind(_feeds(model, {}))
        for n in args.threads:
            mod.set_num_threads(n)
            hot, later = after_pause(run, args.rounds, args.pause_ms / 1e3)
            print(
                f"{name:<20} {n:>3} {hot * 1e3:>12.3f}  " + " ".join(f"{t * 1e3:.3f}" for t in later),
                flush=True,
            )


if __name__ == "__main__":
    main()
