"""Kernels timed alone, warm and cold, beside their time inside the model.

A tuner times each candidate kernel alone. Called back to back (warm) its weights and input
stay in the caches; inside a model every kernel meets the caches its neighbours left, and
weights that outgrow the last-level cache come from memory. This times a model's heaviest
tasks (the defaults, and each task's best record when a database is given) with the runner
of the device warm and cold (caches flushed before each timed call, activations read back
in), and in place: the model compiled without and with the records, every kernel timed in
model order (`Module.profile`), the two taking turns:

    python -m benchmarks.cold_caches resnet18 --device host --threads 1 --records tune.db
    python3 -m benchmarks.cold_caches resnet18 --device nvidia --tasks 6 [--records gpu.db]

The column closest to "model" says how candidates should be timed.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def _model_path(name: str) -> Path:
    """An .onnx file as given, or a zoo model written to the temp folder."""
    if name.endswith(".onnx"):
        return Path(name)
    from benchmarks.zoo import build

    path = Path(tempfile.gettempdir()) / f"tir-cold-{name}.onnx"
    path.write_bytes(build(name).SerializeToString())
    return path


def _alone(tasks: list, recs: Any, target: str, threads: int) -> dict[tuple[int, str, str], float]:
    """{(task, config, "warm"|"cold"): microseconds per call} from the device's runner."""
    from autotune.measure import MeasureOptions, Measurer

    table = {}
    for timing in ("warm", "cold"):
        opts = MeasureOptions(
            target=target, workers=1, repeat=15, cold=timing == "cold", threads=threads or None
        )
        with Measurer(opts) as m:
            for k, task in enumerate(tasks):
                configs = [{}] + ([recs.best(task.key)] if recs and recs.best(task.key) else [])
                for name, r in zip(("default", "best"), m.measure(task, configs), strict=False):
                    table[(k, name, timing)] = r.cost * 1e6 if r.error is None else math.nan
    return table


def _in_model(path: Path, tasks: list, records: list, target: str, threads: int, rounds: int) -> dict:
    """{(task, config, "model"): microseconds per call} from the compiled models' profiles."""
    import tensorir as tir
    from autotune.interleaved import profile_interleaved

    mods = [tir.compile(str(path), target, records=r) for r in records]
    for mod in mods:
        if threads:
            mod.set_num_threads(threads)
    table = {}
    for name, rows in zip(("default", "best"), profile_interleaved(mods, rounds), strict=False):
        for k, task in enumerate(tasks):
            seconds = float(np.median([r.get(task.key, math.nan) for r in rows]))
            table[(k, name, "model")] = seconds / task.count * 1e6
    return table


def main() -> int:
    from autotune.records import Records, is_log_source
    from autotune.task import extract_tasks, load_graph
    from tensorir.compiler import model_key
    from tensorir.devices import get_tuning_device
    from tensorir.frontend import model_bytes
    from tensorir.target import get_target

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a zoo model name or an .onnx file")
    ap.add_argument("--device", default="host")
    ap.add_argument("--threads", type=int, default=0, help="kernel threads (CPU; 0: all cores)")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15, help="in-model profile rounds")
    ap.add_argument(
        "--records", help="a tuning database, .jsonl log or folder of logs: also time each task's best record"
    )
    args = ap.parse_args()
    target = get_tuning_device(args.device).target
    path = _model_path(args.model)
    recs = None
    if args.records:
        src = Path(args.records)
        db, logs = (False, src) if is_log_source(src) else (args.records, False)
        recs = Records.for_target(get_target(target), db=db, logs=logs, threads=args.threads)
    mkey = model_key(model_bytes(path), None)
    layout = {mkey: recs.best(mkey)} if recs and recs.best(mkey) else {}
    block = layout.get(mkey, {}).get("layout_block")
    tasks = extract_tasks(load_graph(path, target, layout_block=block), target)[: args.tasks]
    table = _alone(tasks, recs, target, args.threads)
    table |= _in_model(path, tasks, [layout] + ([recs] if recs else []), target, args.threads, args.rounds)
    print(f"\n{'task':<58} {'config':<8} {'warm us':>9} {'cold us':>9} {'model us':>9}")
    for k, task in enumerate(tasks):
        for name in ("default", "best"):
            if (k, name, "warm") in table:
                warm, cold, in_model = (table[(k, name, t)] for t in ("warm", "cold", "model"))
                print(f"{str(task)[:58]:<58} {name:<8} {warm:>9.1f} {cold:>9.1f} {in_model:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
