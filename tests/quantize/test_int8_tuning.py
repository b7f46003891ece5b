"""The tuner tunes the integer kernels like any other: a QDQ model's qconv1x1 / qdense /
qdwconv workloads are tasks with knobs, every trial is recorded, and the best config builds a
kernel whose output equals the op's reference bit for bit."""

from __future__ import annotations

import math

import numpy as np

from autotune.database import Database
from autotune.measure import MeasureOptions
from autotune.task import extract_tasks, load_graph
from autotune.tuner import TuneOptions, Tuner
from tensorir.ops.kernel import scratch_arrays
from tensorir.runtime.jit import compile_host

from .test_fold_qdq import _conv_model, _gemm_model

FAST = MeasureOptions(workers=1, repeat=2, min_repeat_s=0.001)
INTEGER_OPS = ("qconv1x1", "qdense", "qdwconv")


def _integer_tasks(model) -> list:
    tasks = extract_tasks(load_graph(model))
    return [t for t in tasks if any(op in t.key for op in INTEGER_OPS)]


def _check_bit_exact(task, config: dict) -> None:
    func, spec = task.build(config)
    kernel = compile_host(func)
    rng = np.random.default_rng(3)
    args = []
    for k, (t, x) in enumerate(zip(task.in_types, task.random_inputs(seed=1), strict=True)):
        if t.dtype == "uint8" and k not in task.int_inputs:  # activations: random bytes, not zeros
            x = rng.integers(0, 256, t.shape).astype(np.uint8)
        if "qdwconv" in task.key and k == 1:  # its int8 weights, held as float32 integers
            x = rng.integers(-127, 128, t.shape).astype(np.float32)
        args.append(x)
    want = task.reference(args)
    for k, fn in spec.transforms.items():
        args[k] = np.ascontiguousarray(fn(args[k]))
    outs = [np.zeros_like(w) for w in want]
    kernel.bind(*args, *outs, *scratch_arrays(func))()
    for got, ref in zip(outs, want, strict=True):
        np.testing.assert_array_equal(got, ref)


def test_integer_kernels_are_tuned_and_the_best_config_is_exact(tmp_path):
    tasks = _integer_tasks(_conv_model(tmp_path)) + _integer_tasks(_gemm_model(tmp_path))
    ops = {op for t in tasks for op in INTEGER_OPS if op in t.key}
    assert ops == set(INTEGER_OPS), [t.key for t in tasks]
    assert all(t.space().size() >= 2 for t in tasks)  # knobs to tune
    db = Database(tmp_path / "int8.db")
    summary = Tuner(tasks, db, TuneOptions(trials=4 * len(tasks), batch_size=4, progress=False), FAST).run()
    assert summary.trials == 4 * len(tasks) and len(db.records()) == summary.trials
    for task in tasks:
        best = db.best(task.key, "host")
        assert best is not None and math.isfinite(best["mean_cost"]), task.key
        _check_bit_exact(task, best["config"])
