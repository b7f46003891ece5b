"""Model-level knobs, measured end to end: the packed layout's channel block and whether
depthwise convs merge into the 1x1 conv after them.

The layout pass packs activations NCHW -> NCHW[x]c with blocks up to x (default: the
target's float32 vector lanes). A different x changes every conv's kernel and the transforms
between them, so it is tuned on the whole model (as TVM's graph tuner and MNN's NC4HW4 choice
do at their level). `fuse_dwpw` (passes/fuse_dwpw.py) trades the depthwise output's round trip
through memory for a kernel that reads the 1x1 weights once per row chunk, which only the
whole model can judge; so does "block", the 1x1 expand merged in front of it too (the
expand recomputed for the depthwise's halo rows, the expanded tensor never in memory). Each
combination is compiled and the model timed, interleaved; the
result is recorded under the model's key (`tensorir.compiler.model_key`) with config
{"layout_block": x, "fuse_dwpw": bool or "block"} ("fuse_dwpw" only for models that have a block to
merge). `tir compile` then reads it like any record (pipeline.model_choices), and the kernel
tasks are extracted from the graph with the chosen knobs.
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


def model_configs(model: str | os.PathLike, target: str, input_shapes: Mapping[str, Sequence[int]] | None):
    """Every model-level config to measure: each layout block, with and without the
    depthwise + 1x1 merge where the model has such a pair, and with the whole block (the
    expand merged too: "block") where it has one."""
    from autotune.task import load_graph
    from tensorir.ops.dwpw import is_dwpw

    g = load_graph(model, target, input_shapes, fuse_dwpw="block")
    bodies = [g.node(n).attr.get("body") for n in g.op_nodes() if g.node(n).op == "fused"]
    merged = [str(b).count("conv2d_nchwc") for b in bodies if is_dwpw(b)]
    fuse = (["block"] if 3 in merged else []) + [True, False] if merged else [None]
    return [
        {"layout_block": b, **({} if f is None else {"fuse_dwpw": f})}
        for b in layout_choices(target)
        for f in fuse
    ]


def _same(a: Mapping, b: Mapping) -> bool:
    """Whether two model configs build the same model (an old record without "fuse_dwpw" was
    measured without the merge)."""
    from tensorir.pipeline import merge_choice

    same_merge = merge_choice(a.get("fuse_dwpw")) == merge_choice(b.get("fuse_dwpw"))
    return a.get("layout_block") == b.get("layout_block") and same_merge


def tune_model_level(
    model: str | os.PathLike,
    db: Database,
    device: str = "host",
    target: str = "host",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    runs: int = 20,
    log=print,
    threads: int | None = None,
) -> dict | None:
    """Measure the model with every model-level config (all together, interleaved) unless
    each has a record; the best config (None when the model has nothing to choose). A new
    round (a config without a record: new code offers a new choice) replaces the model's
    records: the old round's timings came from other code, so they cannot rank with it (they
    had MobileNetV2-224 keep an old unmerged record over the faster new whole-block merge)."""
    import tensorir as tir
    from tensorir.compiler import model_key
    from tensorir.frontend import model_bytes

    key = model_key(model_bytes(model), input_shapes)
    done = [r for r in db.workload_records(key, device, target) if r.get("mean_cost") is not None]
    configs = model_configs(model, target, input_shapes)
    if not all(any(_same(c, r["config"]) for r in done) for c in configs):
        # all choices measured together, interleaved (one at a time drifts with the machine)
        mods = [
            tir.compile(
                os.fspath(model),
                target,
                input_shapes,
                layout_block=c["layout_block"],
                fuse_dwpw=c.get("fuse_dwpw"),
            )
            for c in configs
        ]
        for mod in mods:
            if threads:
                mod.set_num_threads(threads)
        timings = time_interleaved(mods, runs)
        db.forget(key, device)
        done = []
        for config, costs in zip(configs, timings, strict=True):
            rec = {"workload_key": key, "device": device, "target": target, "config": config}
            db.add({**rec, "costs": costs})
            done.append({"config": config, "mean_cost": float(np.mean(costs))})
            log(f"  {_label(config)}: {np.mean(costs) * 1e3:.3f} ms per run")
    finite = [
        r for r in done if math.isfinite(r["mean_cost"]) and any(_same(c, r["config"]) for c in configs)
    ]
    return dict(min(finite, key=lambda r: r["mean_cost"])["config"]) if finite else None


def _label(config: Mapping) -> str:
    merge = config.get("fuse_dwpw")
    return f"layout block {config['layout_block']}" + (
        "" if merge is None else f", depthwise + 1x1 merged {merge}"
    )
