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
from collections.abc import Mapping, Sequence

import numpy as np

from autotune.database import Database
from autotune.model_check import time_interleaved


def layout_choices(target: str) -> list[int]:
    from tensorir.target import get_target

    lanes = get_target(target).vector_lanes("float32")
    return sorted({max(1, lanes // 2), lanes, lanes * 2})


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
    from tensorir.frontend import model_bytes

    key = model_key(model_bytes(model), input_shapes)
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
