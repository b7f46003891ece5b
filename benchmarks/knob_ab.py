"""A schedule knob pinned in every task of a model against the defaults, whole model, side by
side with onnxruntime in the same interleaved rounds; `--profile` adds the kernels whose
in-model time moved (each kernel timed in place, in model order, `Module.profile`).

    python -m benchmarks.knob_ab resnet50 prefetch_weights=0
    python -m benchmarks.knob_ab mobilenet_v2_96 outer_order=rows --threads 1 2 --profile
    python -m benchmarks.knob_ab resnet50 --env TIR_MERGE_ROWS=0   # a switch outside the space

A model is a zoo name (benchmarks/zoo.py), a trained model of benchmarks/wild.py (fed a drawn
document page at its size) or an .onnx file with static input shapes. The pinned build is compiled with
a record per task whose space has the knob (a task without it keeps its defaults); values are
Python literals (`ow_tile=4`, `outer_order=rows`). Prints per thread count the medians, pinned
/ default (the median of the per-round ratios, with their quartiles: a difference inside them
is noise) and how many tasks took the pin. Each build runs from COPIES fresh file copies
(autotune/model_check.py), averaged per round: two byte-identical libraries in two files time
up to 3-4% apart (benchmarks/build_ab.py). Two builds of the same model differ by up to 15%
in a single run on the shared 2-core VM at 2 threads; read a pin's effect from several runs.
"""

from __future__ import annotations

import argparse
import ast
import os
import tempfile
from pathlib import Path


def parse_pins(pairs: list[str]) -> dict[str, object]:
    """`name=value` pairs -> {name: literal value} (a bare word stays a string)."""
    pins: dict[str, object] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"knob_ab: {pair!r}: expected NAME=VALUE")
        try:
            pins[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            pins[name] = text
    return pins


def pinned_records(model, pins: dict[str, object], shapes: dict | None = None) -> dict:
    """task key -> the pins its space has (`shapes`: the model's input shapes)."""
    from autotune.task import extract_tasks, load_graph

    records = {}
    for task in extract_tasks(load_graph(model, input_shapes=shapes)):
        space = task.space()
        names = {k.name for algo in space.algorithms for k in space.knobs(algo)}
        config = {k: v for k, v in pins.items() if k in names}
        if config:
            records[task.key] = config
    return records


def _moved(a, b, rounds: int) -> list[str]:
    """The workloads whose in-model time (all their kernels) moved by more than 3%."""
    import numpy as np

    from autotune.interleaved import profile_interleaved

    pa, pb = profile_interleaved([a, b], rounds)
    keys = [k for k in pa[0] if k in pb[0]]  # a pinned model-level knob may change the kernels
    ta = np.median([[r[k] for k in keys] for r in pa], axis=0)
    tb = np.median([[r[k] for k in keys] for r in pb], axis=0)
    lines = [f"  kernel sums: default {ta.sum() * 1e3:.3f} ms, pinned {tb.sum() * 1e3:.3f} ms"]
    for key, x, y in zip(keys, ta, tb, strict=True):
        if abs(x - y) > 0.03 * x + 4e-6:
            lines.append(f"  {key[:78]:<78} {x * 1e3:8.3f} {y * 1e3:8.3f}")
    return lines


def _compile_pinned(model, records: dict, env: dict[str, str], shapes: dict):
    """The pinned build, compiled with `env` set (and restored after)."""
    import tensorir as tir

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return tir.compile(model, records=records, input_shapes=shapes)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def main(argv: list[str] | None = None) -> None:
    import numpy as np
    import onnx

    import tensorir as tir
    from autotune.model_check import COPIES, placements
    from benchmarks.build_ab import ab_ratios
    from benchmarks.compare import marked_blocks_beside_ort, split_by_apart
    from benchmarks.layout_storms import model_and_feeds

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("pins", nargs="*", metavar="KNOB=VALUE")
    p.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="set while the pinned build compiles"
    )
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--profile", action="store_true", help="also the kernels whose in-model time moved")
    p.add_argument(
        "--pinned-first",
        action="store_true",
        help="load the pinned build first (two identical libraries loaded one after the other can "
        "time 2-4%% apart: claim only what both orders show)",
    )
    args = p.parse_args(argv)
    pins = parse_pins(args.pins)
    blob, feeds = model_and_feeds(args.model)  # a wild model: a document page at its size
    model = onnx.load_from_string(blob)
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    records = pinned_records(model, pins, shapes)
    env = dict(pair.split("=", 1) for pair in args.env)
    if args.pinned_first:
        pinned = _compile_pinned(model, records, env, shapes)
        default = tir.compile(model, input_shapes=shapes)
    else:
        default = tir.compile(model, input_shapes=shapes)
        pinned = _compile_pinned(model, records, env, shapes)
    name = Path(args.model).stem
    order = "pinned loaded first" if args.pinned_first else "default loaded first"
    built = f", built with {env}" if env else ""
    print(f"{name}: {pins} pinned in {len(records)} tasks{built}; {order}")
    with tempfile.TemporaryDirectory() as tmp:  # each build from fresh file copies (build_ab.py)
        copies = [placements(m, COPIES, Path(tmp), tag) for m, tag in ((default, "d"), (pinned, "p"))]
        mods = [m for pair in zip(*copies, strict=True) for m in pair]  # default, pinned, default, ...
        for n in args.threads:
            blocks, far = marked_blocks_beside_ort(mods, model, feeds, n, args.runs)
            ms = np.median(blocks, axis=0) * 1e3
            ratios = ab_ratios(blocks)
            lo, mid, hi = np.percentile(ratios, [25, 50, 75])
            print(
                f"  {n} thread(s): default {ms[0:-1:2].mean():.3f} ms, pinned {ms[1:-1:2].mean():.3f} ms, "
                f"onnxruntime {ms[-1]:.3f} ms; pinned / default {mid:.3f} (quartiles {lo:.3f}-{hi:.3f} "
                f"over {len(blocks)} rounds, {COPIES} file copies of each build)"
                + split_by_apart(ratios, far, "pinned / default"),
                flush=True,
            )
        if args.profile:
            print("\n".join(_moved(default, pinned, 7)))


if __name__ == "__main__":
    main()
