"""Kernels timed alone with warm caches vs cold ones, beside what the model sees.

A tuner times each candidate kernel alone, again and again: its weights and inputs stay in
the GPU's L2. Inside a model every kernel meets caches its neighbours filled. This measures
a model's heaviest tasks (default config, and the best record when a database is given) with
the OpenCL runner warm and with a 256 MB device buffer rewritten before every timed launch:

    python3 -m benchmarks.gpu_cold resnet18 --device nvidia --tasks 6 [--records gpu.db]

and the per-kernel times of the compiled model (`gpu_compare` prints its top kernels) say
which of the two the model is closer to. Runs where the tuner runs (pure Python + pyopencl).
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    from autotune.measure import MeasureOptions, Measurer
    from autotune.records import Records
    from autotune.task import extract_tasks, load_graph
    from benchmarks.zoo import build
    from tensorir.devices import get_tuning_device
    from tensorir.target import get_target

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--device", default="nvidia")
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--records", help="a tuning database: also time each task's best record")
    args = ap.parse_args()
    target = get_tuning_device(args.device).target
    tasks = extract_tasks(load_graph(build(args.model), target), target)[: args.tasks]
    recs = Records.for_target(get_target(target), db=args.records, logs=False) if args.records else None
    rows = []
    for flush in (False, True):
        opts = MeasureOptions(target=target, workers=1, repeat=20, flush_cache=flush)
        with Measurer(opts) as m:
            for k, task in enumerate(tasks):
                configs = [{}] + ([recs.best(task.key)] if recs and recs.best(task.key) else [])
                for name, r in zip(("default", "best"), m.measure(task, configs), strict=False):
                    rows.append((k, name, flush, r.cost * 1e6 if r.error is None else float("nan")))
    table = {(k, name, flush): us for k, name, flush, us in rows}
    print(f"\n{'task':<60} {'config':<8} {'warm us':>9} {'cold us':>9} {'cold/warm':>9}")
    for k, task in enumerate(tasks):
        for name in ("default", "best"):
            if (k, name, False) in table:
                warm, cold = table[(k, name, False)], table[(k, name, True)]
                print(f"{str(task)[:60]:<60} {name:<8} {warm:>9.1f} {cold:>9.1f} {cold / warm:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
