"""Two threads while another process keeps one core busy: tensorir and onnxruntime side by side.

    python -m benchmarks.busy_core                         # resnet18 mobilenet_v2_96
    python -m benchmarks.busy_core squeezenet1_1 --runs 20 --rounds 3

A phone app shares its cores with whatever else runs; a 2-core VM shares them with its other
tenants. Each model is timed at 1 and 2 threads, tensorir and onnxruntime interleaved
(benchmarks.compare's blocks), in alternating phases: idle, then with a busy process (a Python
loop) pinned to the last CPU, --rounds times each. Per phase the medians and the ratios:
2 threads over 1 thread per engine (below 1: the second thread pays), and tensorir over
onnxruntime at 2 threads. A runtime whose spinning threads keep the thread they wait for off
the core runs 2 threads slower than 1 in the busy phase (the pool's sched_yield,
tensorir/codegen/parallel.py). Results: a table and JSON in benchmarks/results/busy_core.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.compare import _ort_session, interleaved_blocks
from benchmarks.zoo import build, sample_inputs

RESULTS = Path(__file__).parent / "results"
DEFAULT = ["resnet18", "mobilenet_v2_96"]
_BUSY = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
end = time.time() + float(sys.argv[2])
while time.time() < end:
    sum(range(10000))
"""


def busy_process(cpu: int, seconds: float) -> subprocess.Popen:
    """A Python loop pinned to `cpu` for `seconds` (killed earlier by the caller)."""
    return subprocess.Popen([sys.executable, "-c", _BUSY, str(cpu), str(seconds)])


def at_threads(fn, set_threads, n: int):
    """fn run at n threads (set on every call: two thread counts of one library interleave)."""

    def run():
        set_threads(n)
        return fn()

    return run


def time_model(name: str, runs: int, rounds: int) -> list[dict]:
    import tensorir as tir

    model = build(name)
    feeds = sample_inputs(model)
    mod = tir.compile(model)
    ours = mod.bind(feeds)
    sessions = {n: _ort_session(model, n) for n in (1, 2)}
    fns = [at_threads(ours, mod.set_num_threads, n) for n in (1, 2)]
    fns += [lambda s=sessions[n]: s.run(None, feeds) for n in (1, 2)]
    cpu = max(os.sched_getaffinity(0))
    rows = []
    for r in range(2 * rounds):
        busy = r % 2 == 1
        proc = busy_process(cpu, 600) if busy else None
        try:
            time.sleep(0.3 if busy else 0.0)
            blocks = interleaved_blocks(fns, runs, 3) * 1e3
        finally:
            if proc is not None:
                proc.kill()
                proc.wait()
        t1, t2, o1, o2 = np.median(blocks, axis=0)
        rows.append(
            {
                "model": name,
                "busy_core": busy,
                "tensorir_ms_1_2": [t1, t2],
                "onnxruntime_ms_1_2": [o1, o2],
                "tensorir_2_over_1": float(np.median(blocks[:, 1] / blocks[:, 0])),
                "onnxruntime_2_over_1": float(np.median(blocks[:, 3] / blocks[:, 2])),
                "ratio_2_threads": float(np.median(blocks[:, 1] / blocks[:, 3])),
            }
        )
    return rows


def print_rows(rows: list[dict]) -> None:
    print(
        f"{'model':<18} {'phase':<6} {'tensorir 1 / 2 ms':>18} {'ort 1 / 2 ms':>16} "
        f"{'2t/1t tir':>9} {'2t/1t ort':>9} {'tir/ort 2t':>10}"
    )
    for r in rows:
        t1, t2 = r["tensorir_ms_1_2"]
        o1, o2 = r["onnxruntime_ms_1_2"]
        print(
            f"{r['model']:<18} {'busy' if r['busy_core'] else 'idle':<6} {t1:>8.2f} / {t2:<7.2f} "
            f"{o1:>7.2f} / {o2:<6.2f} {r['tensorir_2_over_1']:>9.2f} {r['onnxruntime_2_over_1']:>9.2f} "
            f"{r['ratio_2_threads']:>10.2f}"
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help=f"zoo models (default: {' '.join(DEFAULT)})")
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--rounds", type=int, default=2, help="idle and busy phases, each")
    p.add_argument("--out", default=str(RESULTS / "busy_core.json"))
    args = p.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("busy_core: needs 2 CPUs in this process's affinity mask")
    rows = []
    for name in args.models or DEFAULT:
        rows += time_model(name, args.runs, args.rounds)
        print_rows(rows[-2 * args.rounds :])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
