"""Model-level knobs, measured end to end: the packed layout's channel block.

The layout pass packs activations NCHW -> NCHW[x]c with blocks up to x (default: the
target's float32 vector lanes). A different x changes every conv's kernel and the transforms
between them, so it is tuned on the whole model (as TVM's graph tuner and MNN's NC4HW4 choice
do at their level): compile with each choice, time the model, record the result under the
model's key (`tensorir.compiler.model_key`) with config {"layout_block": x}. `tir compile`
then reads it like any record, and the kernel tasks are extracted from the graph with the
chosen block.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from autotune.database import Database


def layout_choices(target: str) -> list[int]:
    from tensorir.target import get_target

    lanes = get_target(target).vector_lanes("float32")
    return sorted({max(1, lanes // 2), lanes, lanes * 2})


def _feeds(mod) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        t["name"]: rng.uniform(-1, 1, t["shape"]).astype(t["dtype"])
        if "float" in t["dtype"]
        else np.zeros(t["shape"], t["dtype"])
        for t in mod.inputs
    }


def time_interleaved(mods: Sequence, runs: int, rounds: int = 5) -> list[list[float]]:
    """Per module `rounds` costs, each the median of runs / rounds timed runs; the modules
    take turns round by round, so a slower stretch of a shared machine hits all of them."""
    calls = [m.bind(_feeds(m)) for m in mods]
    for call in calls:
        for _ in range(3):
            call()
    costs: list[list[float]] = [[] for _ in mods]
    for _ in range(rounds):
        for k, call in enumerate(calls):
            times = []
            for _ in range(max(1, runs // rounds)):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            costs[k].append(float(np.median(times)))
    return costs


def tune_layout(
    model: str | os.PathLike,
    db: Database,
    device: str = "host",
    target: str = "host",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    runs: int = 20,
    log=print,
    threads: int | None = None,
) -> int | None:
    """Measure the model with each layout block not measured yet; the best block (None when
    the model has nothing to pack)."""
    import tensorir as tir
    from tensorir.compiler import model_key

    key = model_key(Path(model).read_bytes(), input_shapes)
    done = {r["config"].get("layout_block"): r for r in db.workload_records(key, device, target)}
    todo = [b for b in layout_choices(target) if b not in done]
    if todo:  # all choices measured together, interleaved (one at a time drifts with the machine)
        blocks = layout_choices(target)
        mods = [tir.compile(os.fspath(model), target, input_shapes, layout_block=b) for b in blocks]
        for mod in mods:
            if threads:
                mod.set_num_threads(threads)
        for block, costs in zip(blocks, time_interleaved(mods, runs), strict=True):
            config = {"layout_block": block}
            rec = {"workload_key": key, "device": device, "target": target, "config": config}
            db.add({**rec, "costs": costs})
            done[block] = {"mean_cost": float(np.mean(costs))}
            log(f"  layout block {block}: {np.mean(costs) * 1e3:.3f} ms per run")
    costs = {b: r["mean_cost"] for b, r in done.items() if r.get("mean_cost") is not None}
    costs = {b: c for b, c in costs.items() if math.isfinite(c)}
    return min(costs, key=costs.get) if costs else None


def model_ab(
    model: str | os.PathLike,
    db_path: str | os.PathLike,
    device: str,
    target: str,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    runs: int = 30,
    threads: int | None = None,
) -> tuple[float, float]:
    """(seconds per run without records, with the device's best records): the whole model
    compiled both ways and timed interleaved, so a tuning run ends with what the model sees
    and not only the sum of kernels timed alone."""
    import tensorir as tir
    from autotune.records import Records

    records = Records.open(db_path, False, device=device)
    mods = [tir.compile(os.fspath(model), target, input_shapes, records=r) for r in (None, records)]
    for mod in mods:
        if threads:
            mod.set_num_threads(threads)
    plain, tuned = time_interleaved(mods, runs)
    return float(np.median(plain)), float(np.median(tuned))
